"""`patchset apply`: put the series on a PyTorch checkout (or take it back out), all or nothing.

The work is `series.apply_series`; this module is its command line.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import Project, Runner, add_command
from .series import apply_series
from .source import ensure_checkout


def cmd_apply(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    checkout = Path(args.checkout).resolve() if args.checkout else project.default_checkout
    if checkout == project.default_checkout:
        ensure_checkout(project, runner)  # the tool's own checkout: fetch it if it is not there
    print(f"apply: {apply_series(project, runner, checkout, reverse=args.reverse)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "apply", cmd_apply,
        help="apply the series to a PyTorch 1.13.1 checkout (all or nothing)",
        description="Apply patches/series to a checkout whose base files match patches/base.sha256. "
                    "A clean git checkout gets one commit per patch (git am), others git apply.",
    )
    parser.add_argument("--checkout", metavar="DIR",
                        help="PyTorch checkout (default: .cache/checkout/pytorch-1.13.1)")
    parser.add_argument("--reverse", action="store_true", help="take the series back out")
