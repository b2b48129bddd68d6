"""`patchset run`: the whole pipeline, setup -> apply -> overlay -> install -> upstream tests.

The series goes onto the tool's own `.cache/patched-checkout/`, never onto `.cache/checkout/`,
which stays the tree `setup` extracted; the summary says which of the two holds what.
The exit code is the upstream tests' (non-zero on a regression of the patched torch).
"""
from __future__ import annotations

import argparse

from .series import apply_series, checkout_state, hashes, patched_result, reset_cached_checkout
from .common import Project, Runner, add_command, read_base_hashes
from .overlay_hook import install_project_venv
from .overlay import ensure_overlay
from .setup_cmd import ensure_setup
from .source import ensure_extracted
from .upstream_tests_cmd import run_upstream_tests


def cached_checkout_note(project: Project, runner: Runner) -> str:
    """What .cache/checkout holds: run leaves it as it found it, and says so."""
    checkout = project.default_checkout
    state = checkout_state(checkout, read_base_hashes(project), hashes(patched_result(project, runner)))
    if state.kind == "pristine":
        return f"{checkout} untouched (pristine v1.13.1)"
    return (f"{checkout} is NOT pristine ({state.kind}: left so by `apply` or an older `run`); "
            "`./build_scripts/patchset pristine DIR` writes a pristine v1.13.1 tree")


def cmd_run(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    ensure_setup(project, runner)
    print("run: setup done", flush=True)
    checkout = ensure_extracted(project, runner, project.patched_checkout)
    reset = reset_cached_checkout(project, runner, checkout)
    if reset:
        print(f"run: {reset}", flush=True)
    applied = apply_series(project, runner, checkout)
    print(f"run: apply: {applied}", flush=True)
    written = ensure_overlay(project, runner)
    print(f"run: overlay: {'wrote ' + ', '.join(written) if written else 'up to date'}", flush=True)
    install_project_venv(project, runner)
    print("run: overlay installed into .venv", flush=True)
    code = int(run_upstream_tests(project, runner, checkout))
    verdict = "no regressions, the series' tests pass" if code == 0 else f"FAILED (exit {code})"
    print(f"run: series applied to {checkout}; {cached_checkout_note(project, runner)}; "
          f"torch_overlay/ active in {project.venv}; upstream tests (table above): {verdict}")
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(
        subparsers, "run", cmd_run,
        help="setup, apply, overlay, install, then run the upstream tests",
        description="The whole pipeline: the series applied to .cache/patched-checkout/ (never "
                    "to .cache/checkout/), then upstream's tests there; exit code of the "
                    "upstream tests.",
    )
