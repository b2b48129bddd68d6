"""`patchset author set "Name <email>"`: the series' author, named by every export.

The work is in `authorship`; this module is its command line.
"""
from __future__ import annotations

import argparse

from .authorship import author_file, set_series_author
from .common import Project, Runner, add_command


def cmd_author(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    author = set_series_author(project, args.identity)
    print(f"author: {author_file(project)} names {author}; commit it, exports name it as the "
          "author of the series' patches")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "author", cmd_author,
        help="set the series' author, whom every export names (patches/author.json)",
        description="Write patches/author.json, the maintainer's identity that `export` gives the "
                    "patches with a placeholder author (From:, DEP-3 Author:). Set once and "
                    "committed; a placeholder (.invalid) or malformed identity is refused with "
                    "nothing written.",
    )
    parser.add_argument("action", choices=["set"])
    parser.add_argument("identity", metavar="'NAME <EMAIL>'")
