"""`patchset pristine DIR`: a pristine v1.13.1 tree at DIR, from the verified orig tarball.

The work is `source.write_pristine_tree`; this module is its command line.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import Project, Runner, add_command
from .source import write_pristine_tree


def cmd_pristine(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    tree = write_pristine_tree(project, runner, Path(args.dir).resolve())
    print(f"pristine: {tree} is PyTorch v1.13.1 as the verified orig tarball holds it "
          "(base files checked against patches/base.sha256)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "pristine", cmd_pristine,
        help="write a pristine v1.13.1 tree to DIR (from the verified orig tarball)",
        description="Extract the sha256-checked orig tarball of patches/base.json into DIR, which "
                    "must not exist or be empty, and check its base files against "
                    "patches/base.sha256. The series is not applied.",
    )
    parser.add_argument("dir", metavar="DIR", help="a new or empty directory")
