"""Command line of the patchset tool: one argparse parser, one module per subcommand group.

Each subcommand module exposes `register(subparsers)`, which adds its parsers and sets
`func(project, runner, args) -> int` on them.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import List, Optional

from .common import PatchsetError, Runner, find_project

# Order is the order of `--help`.
SUBCOMMAND_MODULES = [
    "setup_cmd",
    "pristine_cmd",
    "check_cmd",
    "apply_cmd",
    "overlay_cmd",
    "install_cmd",
    "upstream_tests_cmd",
    "run_cmd",
    "test_cmd",
    "status_cmd",
    "bench_cmd",
    "crossref_cmd",
    "author_cmd",
    "export_cmd",
    "refresh_cmd",
    "source_build_cmd",
    "lint_cmd",
]


def import_subcommand(name: str) -> ModuleType:
    """A subcommand module that cannot be imported is a broken tool, never a missing command."""
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as exc:
        raise PatchsetError(f"build_scripts/patchset_lib/{name}.py cannot be imported: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patchset",
        description="Apply, install and test the PyTorch 1.13.1 fake-tensor patch set.",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not echo external commands")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMAND_MODULES:
        import_subcommand(name).register(subparsers)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but a subcommand that sets the default `pass_through=DEST` gets
    the unknown arguments that trail the command line in args.DEST, e.g. `patchset test -k foo`
    hands `-k foo` to pytest (argparse.REMAINDER refuses arguments that start with an option).
    Any other unknown argument is refused as by parse_args."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        given = sys.argv[1:] if argv is None else list(argv)
        dest = getattr(args, "pass_through", None)
        if dest is None or unknown != given[len(given) - len(unknown):]:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        setattr(args, dest, unknown)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    try:
        parser = build_parser()
    except PatchsetError as exc:
        print(f"patchset: error: {exc}", file=sys.stderr)
        return 1
    args = parse_args(parser, argv)
    project = find_project()
    runner = Runner(log_file=project.log_file, echo=not args.quiet)
    try:
        return int(args.func(project, runner, args) or 0)
    except PatchsetError as exc:
        print(f"patchset {args.command}: error: {exc}", file=sys.stderr)
        return 1
