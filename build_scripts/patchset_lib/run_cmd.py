"""`patchset run`: the whole pipeline, setup -> apply -> overlay -> install -> upstream tests.

The exit code is the upstream tests' (non-zero on a regression of the patched torch).
"""
from __future__ import annotations

import argparse

from .series import apply_series, reset_cached_checkout
from .common import Project, Runner, add_command
from .overlay_hook import install_project_venv
from .overlay import ensure_overlay
from .setup_cmd import ensure_setup
from .upstream_tests_cmd import run_upstream_tests


def cmd_run(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    ensure_setup(project, runner)
    print("run: setup done", flush=True)
    checkout = project.default_checkout
    reset = reset_cached_checkout(project, runner)
    if reset:
        print(f"run: {reset}", flush=True)
    applied = apply_series(project, runner, checkout)
    print(f"run: apply: {applied}", flush=True)
    written = ensure_overlay(project, runner)
    print(f"run: overlay: {'wrote ' + ', '.join(written) if written else 'up to date'}", flush=True)
    install_project_venv(project, runner)
    print("run: overlay installed into .venv", flush=True)
    code = int(run_upstream_tests(project, runner, checkout))
    verdict = "no regressions" if code == 0 else f"FAILED (exit {code})"
    print(f"run: series applied to {checkout}; torch_overlay/ active in {project.venv}; "
          f"upstream tests (table above): {verdict}")
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(
        subparsers, "run", cmd_run,
        help="setup, apply, overlay, install, then run the upstream tests",
        description="The whole pipeline on the cached checkout; exit code of the upstream tests.",
    )
