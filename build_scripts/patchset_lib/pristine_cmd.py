"""`patchset pristine [--git] DIR`: a pristine v1.13.1 tree at DIR, from the verified orig
tarball; with --git also a git checkout of it: one commit of the whole tree, tagged v1.13.1.

The tree is `source.write_pristine_tree`; the commit `series_io.make_git_checkout` (the fixed identity
and date of the tool's base commits: no git identity needed, the same commit id every time, but
not upstream's, which the git export's `base-commit:` names). This module is its command line.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import Project, Runner, add_command, base_pin
from .series_io import make_git_checkout
from .source import write_pristine_tree


def cmd_pristine(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    tree = write_pristine_tree(project, runner, Path(args.dir).resolve())
    print(f"pristine: {tree} is PyTorch v1.13.1 as the verified orig tarball holds it "
          "(base files checked against patches/base.sha256)")
    if args.git:
        commit = make_git_checkout(project, runner, tree)
        pin = base_pin(project)
        print(f"pristine: a git checkout, one commit {commit[:12]} tagged {pin['upstream_tag']} "
              f"(not upstream's commit {pin['upstream_commit'][:12]}, which the git export's "
              "base-commit: names)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "pristine", cmd_pristine,
        help="write a pristine v1.13.1 tree to DIR (from the verified orig tarball)",
        description="Extract the sha256-checked orig tarball of patches/base.json into DIR, which "
                    "must not exist or be empty, and check its base files against "
                    "patches/base.sha256. The series is not applied.",
    )
    parser.add_argument("--git", action="store_true",
                        help="also make DIR a git checkout (no network, no git identity needed): "
                             "one commit of the tree, tagged v1.13.1, for `git am` and `apply --checkout`")
    parser.add_argument("dir", metavar="DIR", help="a new or empty directory")
