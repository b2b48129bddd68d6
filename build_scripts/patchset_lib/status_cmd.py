"""`patchset status`: what is where (base, series on the default checkout, overlay, venv).

Only looks: never fetches, writes or installs anything, and always exits 0.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, List, Tuple

from .series import checkout_state, hashes, load_series, patched_result
from .common import PatchsetError, Project, Runner, add_command, base_pin, quiet, read_base_hashes
from .overlay import overlay_state
from .project_venv import PINNED_PIP, check_venv_kind, venv_versions
from .source import check_pristine, check_tarball, tarball_path

OVERLAY_PTH = "patchset_overlay.pth"


def base_status(project: Project) -> str:
    pin = base_pin(project)
    tarball = check_tarball(tarball_path(project), pin["orig_tarball_sha256"]) or "verified"
    checkout = "present" if project.default_checkout.is_dir() else "missing"
    pristine = check_pristine(project) or "hashes ok"
    return f"orig tarball {tarball}; checkout {checkout}; pristine {pristine}"


def series_status(project: Project) -> str:
    series = load_series(project)
    return f"{len(series)} patches in patches/series: {', '.join(p.name for p in series)}"


def checkout_status(project: Project, runner: Runner) -> str:
    checkout = project.default_checkout
    if not checkout.is_dir():
        return f"{checkout} missing (run `patchset setup`)"
    if check_pristine(project) is not None:
        return "unknown (pristine base files missing; run `patchset setup`)"
    state = checkout_state(checkout, read_base_hashes(project), hashes(patched_result(project, runner)))
    return state.kind + (f": {state.detail}" if state.detail else "") + f" ({checkout})"


def overlay_status(project: Project, runner: Runner) -> str:
    if check_pristine(project) is not None:
        return "unknown (pristine base files missing)"
    return overlay_state(project, runner)


def site_packages(project: Project) -> Path:
    return project.venv / "lib" / "python3.11" / "site-packages"


def venv_status(project: Project, runner: Runner) -> str:
    if not project.venv_python.exists():
        return "missing (run `patchset setup`)"
    error = check_venv_kind(project)
    if error:
        return error
    versions = venv_versions(project, runner)
    pins = ", ".join(
        f"{name} {versions.get(name) or 'missing'}" + ("" if versions.get(name) == want else f" (want {want})")
        for name, want in PINNED_PIP.items()
    )
    return f"present; {pins}; overlay {overlay_activation(project, runner)}"


def overlay_activation(project: Project, runner: Runner) -> str:
    if not (site_packages(project) / OVERLAY_PTH).is_file():
        return f"not installed (no {OVERLAY_PTH}; run `patchset install`)"
    proc = quiet(runner).run(
        [project.venv_python, "-c", "import torch._subclasses.fake_tensor as m; print(m.__file__)"],
        check=False, capture=True,
    )
    if proc.returncode != 0:
        return "installed but `import torch` fails in .venv"
    where = Path(proc.stdout.strip().splitlines()[-1]).resolve()
    if project.overlay.resolve() in where.parents:
        return f"active (fake_tensor from {where})"
    return f"installed but inactive (fake_tensor from {where})"


def cmd_status(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    probes: List[Tuple[str, Callable[[], str]]] = [
        ("base", lambda: base_status(project)),
        ("series", lambda: series_status(project)),
        ("checkout", lambda: checkout_status(project, runner)),
        ("overlay", lambda: overlay_status(project, runner)),
        ("venv", lambda: venv_status(project, runner)),
    ]
    for name, probe in probes:
        try:
            line = probe()
        except PatchsetError as exc:
            line = f"error: {exc}"
        print(f"{name + ':':10} {line}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(
        subparsers, "status", cmd_status,
        help="show base, series, checkout, overlay and venv state",
    )
