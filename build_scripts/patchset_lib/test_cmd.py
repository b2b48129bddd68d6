"""`patchset test`: setup, then the repo's own tests (test/) with the project .venv's pytest.

The repo's torch tests exercise the PATCHED modules, so when a series exists the overlay is
regenerated and made active in .venv first (as `run` does). pytest's exit 5 (nothing collected)
is a failure here: a run that tested nothing must not pass. `--quick` runs only the tests of
what changed against HEAD (`quick_tests`); with nothing changed it runs nothing and says so.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from . import quick_tests
from .common import Project, Runner, add_command
from .overlay_hook import install_project_venv
from .overlay import ensure_overlay
from .setup_cmd import ensure_setup

NO_TESTS_COLLECTED = 5


def pytest_command(project: Project, pytest_args: Sequence[str],
                   tests: Optional[Sequence[str]] = None) -> List[Union[str, Path]]:
    """The pytest run of `patchset test` (of `tests`, relative to the project, else test/); a
    leading `--` only ends our options, pytest does not get it."""
    extra = list(pytest_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    where: List[Union[str, Path]] = [project.tests] if tests is None else list(tests)
    return [project.venv_python, "-m", "pytest", *where, "-q", "-p", "no:cacheprovider", *extra]


def quick_run(project: Project, runner: Runner) -> Tuple[Optional[List[str]], Dict[str, str]]:
    """`--quick`: the tests of what changed against HEAD, printed with why; None: nothing to run."""
    changed = quick_tests.changed_files(project, runner)
    chosen = quick_tests.picks(project, changed)
    print("\n".join(quick_tests.describe(chosen)) or
          f"quick: nothing changed against HEAD in {', '.join(quick_tests.WATCHED)}/")
    tests = quick_tests.selected(chosen)
    files = quick_tests.series_files(project, changed)
    return tests or None, {quick_tests.SERIES_FILES_ENV: ",".join(files)} if files else {}


def cmd_test(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    tests, env = quick_run(project, runner) if args.quick else (None, {})
    if args.quick and tests is None:
        print("patchset test --quick: no tests to run")
        return 0
    ensure_setup(project, runner)
    if project.series_file.is_file():
        ensure_overlay(project, runner)
        install_project_venv(project, runner)
    proc = runner.run(pytest_command(project, args.pytest_args, tests), cwd=project.root, env=env or None,
                      check=False)
    if proc.returncode == NO_TESTS_COLLECTED:
        print("patchset test: error: pytest collected no tests; that is a failure")
        return 1
    return proc.returncode


def register(subparsers: argparse._SubParsersAction) -> None:
    # No positional for them: cli.py hands every argument after `test` to pytest_args.
    parser = add_command(
        subparsers, "test", cmd_test,
        help="setup, then run the repo's tests with .venv's pytest (other args go to pytest)",
        usage="patchset test [-h] [--quick] [[--] PYTEST_ARG ...]",
        description="Run `.venv/bin/python -m pytest test -q`; `patchset test -k foo` and "
                    "`patchset test -- -k foo` both pass -k foo. The whole suite takes about 45 "
                    "minutes on 2 cores.",
        pytest_args=[], pass_through="pytest_args",
    )
    parser.add_argument("--quick", action="store_true",
                        help="only the tests of what changed against HEAD in patches/, test/ and "
                             "build_scripts/ (a changed patch: its series test files after the whole "
                             "series; a tool module: its test_pipeline_*.py), each printed with why")
