"""`patchset tests-patch [--check]`: regenerate (or check) the tests patch; see `tests_patch`."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from . import series_io
from .common import PatchsetError, Project, Runner
from .tests_patch import (
    check_tests_patch,
    current_series,
    generate_tests_patch,
    our_tests_text,
    split_series,
    write_tests_patch,
)


def cmd_tests_patch(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    preceding, old = split_series(current_series(project))
    our_text = our_tests_text(project)
    base_files = series_io.pristine_files(project)
    with tempfile.TemporaryDirectory(prefix="patchset-tests-patch-") as tmp:
        new = generate_tests_patch(project, runner, preceding, base_files, our_text, Path(tmp))
        error = check_tests_patch(old, new)
        if args.check:
            if error:
                raise PatchsetError(error)
            print(f"patches/{new.name} is up to date with test/test_fake_tensor.py")
            return 0
        if error is None:
            print(f"patches/{new.name} is already up to date")
            return 0
        target = write_tests_patch(project, old, new)
    print(f"wrote {target.relative_to(project.root)} and updated patches/series")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tests-patch",
        help="regenerate the last patch (our tests added to test/test_fake_tensor.py)",
        description="Regenerate the series' last patch from test/test_fake_tensor.py of this repo.",
    )
    parser.add_argument("--check", action="store_true",
                        help="only check that the patch matches test/test_fake_tensor.py (exit 1 if not)")
    parser.set_defaults(func=cmd_tests_patch)
