"""`patchset setup`: install whatever is missing, idempotently, and verify the base.

Order matters: apt packages first (git and xz are needed to fetch and apply), then the
system torch is checked against the pinned base, then the Debian source package is fetched
and extracted, then the project `.venv` gets the pinned test tools.
A second run only probes (no echo) and prints one line.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .apt import dpkg_versions, install_apt_packages, missing_apt_packages
from .common import (PatchsetError, Project, Runner, add_command, base_pin, file_digest, check_base_hashes,
                     read_base_hashes)
from .project_venv import ensure_venv
from .pyfind import find_python
from .source import check_pristine, ensure_source
from .venvs import ensure_pinned_venv, venv_python

# Each entry: acceptable package names, the first being the one to install.
APT_PACKAGES: Sequence[Sequence[str]] = (
    ("python3-torch",),
    # the torchvision models of `bench` (M1, M2) and of the graph tests
    ("python3-torchvision",),
    ("python3.11-venv", "python3-venv"),
    ("quilt",),
    ("git",),
    ("xz-utils",),
    ("ca-certificates",),
)

# `setup --pip`: PyPI's torch 1.13.1 (wheels for CPython 3.7-3.10 only; the default one is the
# CUDA 11.7 build, ~3.3 GB with its nvidia-* dependencies, which runs on the CPU too). The test
# tools are pinned to releases that still support all four Pythons; numpy<2 for torch 1.13's
# C ABI; upstream's test_fake_tensor.py imports numpy, test_meta.py yaml; symbolic tracing
# (make_fx tracing_mode="symbolic") needs sympy, which the wheel does not pull in. torchvision
# 0.14.1 is the release built against torch 1.13.1: `bench`'s model traces and the graph tests
# import it, as they do Debian's python3-torchvision in .venv.
PIP_VENV = ".venv-pip"
PIP_PYTHONS = ((3, 10), (3, 9), (3, 8), (3, 7))
PIP_TORCH_PINS: Dict[str, str] = {"torch": "1.13.1", "torchvision": "0.14.1", "numpy": "1.21.6",
                                  "PyYAML": "6.0.1", "sympy": "1.10.1", "pytest": "7.4.4",
                                  "expecttest": "0.1.6"}
# TorchDynamo for torch 1.13 is PyPI's `torchdynamo` 1.13.0 (Python < 3.11, so this venv only):
# its sdist imports torch when it builds, hence --no-build-isolation after the pins above; its
# inductor backend needs filelock on the CPU (and sympy<1.12, which the pin above is).
# `bench`'s dynamo workloads (D1-D4) compile with it.
PIP_DYNAMO_PINS: Dict[str, str] = {"torchdynamo": "1.13.0", "filelock": "3.12.2"}
PIP_DYNAMO_ARGS = ("--no-build-isolation",)


# --- the system torch ---------------------------------------------------------------------

def check_system_torch(project: Project, runner: Runner) -> Optional[str]:
    """Debian's python3-torch of the pinned version, with torch/ base files matching base.sha256."""
    pin = base_pin(project)
    package = pin["debian_binary_package"]
    version = dpkg_versions(runner, [package]).get(package)
    if version is None:
        return f"{package} is not installed"
    # Debian's torch reports 1.13.0a0 itself; dpkg's upstream version is the one to trust, and
    # the base file hashes below are the real guard (a rebuilt -N revision may still match).
    upstream = version.split(":")[-1].split("+")[0].split("-")[0]
    if upstream != pin["torch_version"]:
        return (f"{package} is {version}, the patch set is for torch {pin['torch_version']} "
                f"({pin['debian_source_version']})")
    torch_dir = Path(pin["system_torch_dir"])

    def installed(path: str) -> Path:
        return torch_dir / path[len("torch/"):]

    # test/ files exist only in the source checkout
    hashes = {path: digest for path, digest in sorted(read_base_hashes(project).items())
              if path.startswith("torch/")}
    return check_base_hashes(hashes, lambda path: file_digest(installed(path)),
                             lambda path: str(installed(path)))


# --- all together -------------------------------------------------------------------------

def ensure_setup(project: Project, runner: Runner) -> List[str]:
    """Install what is missing; returns what was done (empty: everything was in place)."""
    actions: List[str] = []
    missing = missing_apt_packages(runner, APT_PACKAGES)
    if missing:
        install_apt_packages(runner, missing)
        actions.append("apt")
    error = check_system_torch(project, runner)
    if error:
        raise PatchsetError(error)
    source_ready = project.default_checkout.is_dir() and check_pristine(project) is None
    if not source_ready:
        ensure_source(project, runner)
        actions.append("source")
    actions += ensure_venv(project, runner)
    return actions


def pip_venv(project: Project) -> Path:
    return project.root / PIP_VENV


def ensure_pip_venv(project: Project, runner: Runner, environ: Mapping[str, str]) -> List[str]:
    """`.venv-pip` with PyPI's torch==1.13.1, made from the first Python 3.7-3.10 found."""
    venv = pip_venv(project)
    if venv_python(venv).exists():
        base = venv_python(venv)  # made before: only its pins are checked
    else:
        base = find_python(runner, PIP_PYTHONS, environ, f"{PIP_VENV} (pip's torch==1.13.1)")
    actions = ensure_pinned_venv(runner, base, venv, PIP_TORCH_PINS, "setup --pip")
    return actions + ensure_pinned_venv(runner, base, venv, PIP_DYNAMO_PINS, "setup --pip",
                                        PIP_DYNAMO_ARGS)


def cmd_setup(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    if args.pip and not venv_python(pip_venv(project)).exists():
        # Before anything else: no usable Python means nothing is installed at all.
        find_python(runner, PIP_PYTHONS, os.environ, f"{PIP_VENV} (pip's torch==1.13.1)")
    actions = ensure_setup(project, runner)
    if args.pip:
        actions += [f"pip venv: {a}" for a in ensure_pip_venv(project, runner, os.environ)]
    if actions:
        print(f"setup: done ({', '.join(actions)}); base verified, .venv ready"
              + (f", {PIP_VENV} ready" if args.pip else ""))
    else:
        print("setup: everything in place")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "setup", cmd_setup,
        help="install what is missing (apt packages, source package, .venv); idempotent",
        description="Install apt packages, fetch the pinned Debian source package into .cache/, "
                    "verify the system torch base, and make .venv with pinned pytest/expecttest.",
    )
    parser.add_argument("--pip", action="store_true",
                        help=f"also make {PIP_VENV} with PyPI's torch==1.13.1 from the first Python "
                             "3.7-3.10 found (pyenv's versions, then python3.N on PATH); ~3.3 GB")
