"""`patchset overlay`: write torch_overlay/ and the generated test files from pristine base +
series, or check them (`--check`).

The work is in `overlay` and `generated_tests`; this module is its command line.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import PatchsetError, Project, Runner, add_command
from .generated_tests import check_tests, expected_tests, write_tests
from .overlay import check_checkout, check_overlay, expected_overlay, write_overlay
from .series import patched_result


def cmd_overlay(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    result = patched_result(project, runner)
    wanted = expected_overlay(project, runner, result)
    tests = expected_tests(result)
    if args.check:
        errors = [check_overlay(project, wanted), check_tests(project, tests)]
        if args.checkout:
            errors.append(check_checkout(Path(args.checkout).resolve(), result))
        found = [e for e in errors if e]
        if found:
            raise PatchsetError("; ".join(found))
        where = " and " + args.checkout if args.checkout else ""
        print(f"overlay: torch_overlay/, {', '.join(tests)}{where} match pristine base + series")
        return 0
    if args.checkout:
        raise PatchsetError("--checkout is only used with --check")
    written = ["torch_overlay/" + p for p in write_overlay(project, wanted)] + write_tests(project, tests)
    modules = len(wanted) - 1
    if written:
        print(f"overlay: wrote {', '.join(written)}")
    else:
        print(f"overlay: torch_overlay/ up to date ({modules} files)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "overlay", cmd_overlay,
        help="generate torch_overlay/ from the pristine base + series",
        description="Write torch_overlay/<path> for each torch/ file the series changes, MANIFEST, "
                    "and the generated test files (test/test_fake_tensor.py, test/test_weak.py).",
    )
    parser.add_argument("--check", action="store_true",
                        help="do not write; fail naming the file if torch_overlay/ (or --checkout) is stale")
    parser.add_argument("--checkout", metavar="DIR", help="with --check: also verify this patched checkout")
