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

from .common import PatchsetError, Project, Runner, base_pin, quiet, read_base_hashes, sha256_file
from .source import check_pristine, ensure_source
from .pyfind import find_python
from .venvs import ensure_pinned_venv, venv_python
from .venvs import installed_versions as installed_versions_in

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
PINNED_PIP: Dict[str, str] = {"pytest": "9.2.0", "expecttest": "0.3.0"}

# `setup --pip`: PyPI's torch 1.13.1 (wheels for CPython 3.7-3.10 only; the default one is the
# CUDA 11.7 build, ~3.3 GB with its nvidia-* dependencies, which runs on the CPU too). The test
# tools are pinned to releases that still support all four Pythons; numpy<2 for torch 1.13's
# C ABI; upstream's test_fake_tensor.py imports numpy, test_meta.py yaml; symbolic tracing
# (make_fx tracing_mode="symbolic") needs sympy, which the wheel does not pull in.
PIP_VENV = ".venv-pip"
PIP_PYTHONS = ((3, 10), (3, 9), (3, 8), (3, 7))
PIP_TORCH_PINS: Dict[str, str] = {"torch": "1.13.1", "numpy": "1.21.6", "PyYAML": "6.0.1",
                                  "sympy": "1.10.1", "pytest": "7.4.4", "expecttest": "0.1.6"}


# --- apt ----------------------------------------------------------------------------------

def installed_versions(runner: Runner, names: Sequence[str]) -> Dict[str, str]:
    """name -> version of the packages dpkg reports as installed (`ii`)."""
    proc = quiet(runner).run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev} ${Version}\n", *names],
        check=False, capture=True,
    )
    found: Dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "ii":
            found[parts[0].split(":")[0]] = parts[-1]
    return found


def missing_apt_packages(runner: Runner, groups: Sequence[Sequence[str]] = APT_PACKAGES) -> List[str]:
    wanted = [name for group in groups for name in group]
    present = installed_versions(runner, wanted)
    return [group[0] for group in groups if not any(name in present for name in group)]


def install_apt_packages(runner: Runner, packages: Sequence[str]) -> None:
    if os.geteuid() != 0:
        raise PatchsetError(f"missing apt packages {' '.join(packages)}: run setup as root, "
                            f"or `apt-get install {' '.join(packages)}`")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    print(f"setup: installing apt packages: {' '.join(packages)}", flush=True)
    runner.run(["apt-get", "update"], env=env)
    runner.run(["apt-get", "install", "-y", "--no-install-recommends", *packages], env=env)


# --- the system torch ---------------------------------------------------------------------

def check_system_torch(project: Project, runner: Runner) -> Optional[str]:
    """Debian's python3-torch of the pinned version, with torch/ base files matching base.sha256."""
    pin = base_pin(project)
    package = pin["debian_binary_package"]
    version = installed_versions(runner, [package]).get(package)
    if version is None:
        return f"{package} is not installed"
    # Debian's torch reports 1.13.0a0 itself; dpkg's upstream version is the one to trust, and
    # the base file hashes below are the real guard (a rebuilt -N revision may still match).
    upstream = version.split(":")[-1].split("+")[0].split("-")[0]
    if upstream != pin["torch_version"]:
        return (f"{package} is {version}, the patch set is for torch {pin['torch_version']} "
                f"({pin['debian_source_version']})")
    torch_dir = Path(pin["system_torch_dir"])
    for path, digest in sorted(read_base_hashes(project).items()):
        if not path.startswith("torch/"):
            continue  # test/ files exist only in the source checkout
        installed = torch_dir / path[len("torch/"):]
        if not installed.is_file():
            return f"{installed} is missing"
        if sha256_file(installed) != digest:
            return f"{installed} does not match patches/base.sha256: not the pinned torch {pin['torch_version']} base"
    return None


# --- the project venv ---------------------------------------------------------------------

def read_pyvenv_cfg(venv: Path) -> Dict[str, str]:
    cfg: Dict[str, str] = {}
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            cfg[key.strip()] = value.strip()
    return cfg


def check_venv(project: Project) -> Optional[str]:
    """None when .venv is a --system-site-packages venv of the system python (or absent)."""
    venv = project.venv
    if not venv.exists():
        return None
    system_python = Path(base_pin(project)["system_python"])
    if not (venv / "pyvenv.cfg").is_file() or not project.venv_python.exists():
        return f"{venv} is not a venv; remove it and run setup again"
    cfg = read_pyvenv_cfg(venv)
    if cfg.get("include-system-site-packages", "").lower() != "true" or \
            Path(cfg.get("home", "")) != system_python.parent or \
            not cfg.get("version", "").startswith("3.11"):
        return (f"{venv} was not made by `{system_python} -m venv --system-site-packages`; "
                "remove it and run setup again")
    return None


def venv_versions(project: Project, runner: Runner) -> Dict[str, Optional[str]]:
    """Installed version of each pinned package as the venv python sees it (None if absent)."""
    return installed_versions_in(runner, project.venv_python, list(PINNED_PIP))


def ensure_venv(project: Project, runner: Runner) -> List[str]:
    error = check_venv(project)
    if error:
        raise PatchsetError(error)
    actions: List[str] = []
    if not project.venv.exists():
        system_python = base_pin(project)["system_python"]
        print(f"setup: creating {project.venv} from {system_python}", flush=True)
        runner.run([system_python, "-m", "venv", "--system-site-packages", project.venv])
        actions.append("venv")
    versions = venv_versions(project, runner)
    wrong = [f"{name}=={want}" for name, want in PINNED_PIP.items() if versions.get(name) != want]
    if wrong:
        print(f"setup: installing {' '.join(wrong)} into .venv", flush=True)
        runner.run([project.venv_python, "-m", "pip", "install", "--disable-pip-version-check",
                    "--no-input", *wrong])
        versions = venv_versions(project, runner)
        still = [name for name, want in PINNED_PIP.items() if versions.get(name) != want]
        if still:
            raise PatchsetError(f"pip did not install the pinned {', '.join(still)}")
        actions.append("pip")
    return actions


# --- all together -------------------------------------------------------------------------

def ensure_setup(project: Project, runner: Runner) -> List[str]:
    """Install what is missing; returns what was done (empty: everything was in place)."""
    actions: List[str] = []
    missing = missing_apt_packages(runner)
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
    return ensure_pinned_venv(runner, base, venv, PIP_TORCH_PINS, "setup --pip")


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
    parser = subparsers.add_parser(
        "setup", help="install what is missing (apt packages, source package, .venv); idempotent",
        description="Install apt packages, fetch the pinned Debian source package into .cache/, "
                    "verify the system torch base, and make .venv with pinned pytest/expecttest.",
    )
    parser.add_argument("--pip", action="store_true",
                        help=f"also make {PIP_VENV} with PyPI's torch==1.13.1 from the first Python "
                             "3.7-3.10 found (pyenv's versions, then python3.N on PATH); ~3.3 GB")
    parser.set_defaults(func=cmd_setup)
