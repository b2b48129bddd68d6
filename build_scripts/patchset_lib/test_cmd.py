"""`patchset test`: setup, then the repo's own tests (test/) with the project .venv's pytest.

The repo's torch tests exercise the PATCHED modules, so when a series exists the overlay is
regenerated and made active in .venv first (as `run` does). pytest's exit 5 (nothing collected)
is a failure here: a run that tested nothing must not pass.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Sequence, Union

from .common import Project, Runner, add_command
from .overlay_hook import install_project_venv
from .overlay import ensure_overlay
from .setup_cmd import ensure_setup

NO_TESTS_COLLECTED = 5


def pytest_command(project: Project, pytest_args: Sequence[str]) -> List[Union[str, Path]]:
    """The pytest run of `patchset test`; a leading `--` only ends our options, pytest does not get it."""
    extra = list(pytest_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return [project.venv_python, "-m", "pytest", project.tests, "-q", "-p", "no:cacheprovider", *extra]


def cmd_test(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    ensure_setup(project, runner)
    if project.series_file.is_file():
        ensure_overlay(project, runner)
        install_project_venv(project, runner)
    proc = runner.run(pytest_command(project, args.pytest_args), cwd=project.root, check=False)
    if proc.returncode == NO_TESTS_COLLECTED:
        print("patchset test: error: pytest collected no tests; that is a failure")
        return 1
    return proc.returncode


def register(subparsers: argparse._SubParsersAction) -> None:
    # No positional for them: cli.py hands every argument after `test` to pytest_args.
    add_command(
        subparsers, "test", cmd_test,
        help="setup, then run the repo's tests with .venv's pytest (other args go to pytest)",
        usage="patchset test [-h] [[--] PYTEST_ARG ...]",
        description="Run `.venv/bin/python -m pytest test -q`; `patchset test -k foo` and "
                    "`patchset test -- -k foo` both pass -k foo.",
        pytest_args=[], pass_through="pytest_args",
    )
