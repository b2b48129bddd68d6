"""`patchset run`: the whole pipeline, setup -> apply -> overlay -> install -> upstream tests.

The exit code is the upstream tests' (non-zero on a regression of the patched torch).
"""
from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from .apply_cmd import apply_series, reset_cached_checkout
from .common import PatchsetError, Project, Runner
from .overlay_cmd import ensure_overlay
from .setup_cmd import ensure_setup


def pipeline_module(name: str) -> ModuleType:
    """Import a sibling subcommand module at run time, with a clear error if it is not there."""
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__package__}.{name}":
            raise PatchsetError(f"`run` needs build_scripts/patchset_lib/{name}.py, which is missing") from exc
        raise


def cmd_run(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    install_cmd = pipeline_module("install_cmd")
    upstream_tests_cmd = pipeline_module("upstream_tests_cmd")
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
    install_cmd.install_project_venv(project, runner)
    print("run: overlay installed into .venv", flush=True)
    code = int(upstream_tests_cmd.run_upstream_tests(project, runner, checkout))
    verdict = "no regressions" if code == 0 else f"FAILED (exit {code})"
    print(f"run: series applied to {checkout}; torch_overlay/ active in {project.venv}; "
          f"upstream tests (table above): {verdict}")
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="setup, apply, overlay, install, then run the upstream tests",
        description="The whole pipeline on the cached checkout; exit code of the upstream tests.",
    )
    parser.set_defaults(func=cmd_run)
