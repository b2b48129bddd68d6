"""Command line of the patchset tool: one argparse parser, one module per subcommand group.

Each subcommand module exposes `register(subparsers)`, which adds its parsers and sets
`func(project, runner, args) -> int` on them.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from .common import PatchsetError, Runner, find_project

# Order is the order of `--help`.
SUBCOMMAND_MODULES = [
    "setup_cmd",
    "apply_cmd",
    "overlay_cmd",
    "install_cmd",
    "upstream_tests_cmd",
    "run_cmd",
    "test_cmd",
    "status_cmd",
    "bench_cmd",
    "tests_patch_cmd",
    "export_cmd",
    "refresh_cmd",
    "source_build_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patchset",
        description="Apply, install and test the PyTorch 1.13.1 fake-tensor patch set.",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not echo external commands")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue  # subcommand not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    project = find_project()
    runner = Runner(log_file=project.log_file, echo=not args.quiet)
    try:
        return int(args.func(project, runner, args) or 0)
    except PatchsetError as exc:
        print(f"patchset {args.command}: error: {exc}", file=sys.stderr)
        return 1
