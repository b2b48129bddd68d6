"""The interpreter whose torch the overlay goes into: where its torch is, and the checks that
it is the 1.13.1 the series is based on, that its base files are untouched, and that it is
not a system interpreter or package (probed without importing torch).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
from pathlib import Path
from typing import Dict, Optional, Sequence

from .apt import dpkg_versions
from .common import Project, Runner, base_pin, file_digest, check_base_hashes, raise_if
from .overlay import ManifestEntry

TORCH_VERSION = "1.13.1"

# Where a torch package counts as system-owned: never replace files there.
SYSTEM_TORCH_PATTERNS = ("/usr/lib/python3*/*", "/usr/local/lib/python3*/dist-packages/*")
SYSTEM_PYTHON_PATTERN = "/usr/bin/python3*"

# Runs inside the target interpreter: locate torch and its version WITHOUT importing it.
PROBE_SCRIPT = r"""
import importlib.util, json, os, re, sys, sysconfig
info = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
        "purelib": sysconfig.get_paths()["purelib"], "torch_dir": None,
        "version_py": None, "dist_version": None}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    info["torch_dir"] = os.path.dirname(os.path.realpath(spec.origin))
    try:
        with open(os.path.join(info["torch_dir"], "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        info["version_py"] = m.group(1) if m else None
    except OSError:
        pass
try:
    from importlib.metadata import version
    info["dist_version"] = version("torch")
except Exception:
    pass
print(json.dumps(info))
"""

# Prints where each module came from, as JSON; modules are passed as arguments.
WHERE_SCRIPT = r"""
import importlib, json, os, sys
print(json.dumps({n: os.path.realpath(importlib.import_module(n).__file__) for n in sys.argv[1:]}))
"""


@dataclasses.dataclass(frozen=True)
class TorchInfo:
    """What the target interpreter sees, as reported by PROBE_SCRIPT."""

    python: Path
    executable: str
    prefix: str
    base_prefix: str
    purelib: Path
    torch_dir: Optional[Path]
    version_py: Optional[str]
    dist_version: Optional[str]


# --- the target interpreter -----------------------------------------------------------

def probe_python(runner: Runner, python: Path) -> TorchInfo:
    # -I: neither the cwd nor PYTHON* variables may change what torch is found; the hook
    # is disabled so that the installed torch is what we look at.
    # The script goes through stdin so that the command log stays one readable line.
    proc = runner.run([python, "-I", "-B", "-"], input=PROBE_SCRIPT, capture=True,
                      env={"PATCHSET_OVERLAY": "0"})
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return TorchInfo(
        python=python,
        executable=data["executable"],
        prefix=data["prefix"],
        base_prefix=data["base_prefix"],
        purelib=Path(data["purelib"]),
        torch_dir=Path(data["torch_dir"]) if data["torch_dir"] else None,
        version_py=data["version_py"],
        dist_version=data["dist_version"],
    )


def _base_version(version: Optional[str]) -> Optional[str]:
    return None if version is None else version.split("+", 1)[0]


def check_torch_version(info: TorchInfo, debian_torch_dir: Path, debian_version: Optional[str]) -> Optional[str]:
    """None when the torch `info` sees is 1.13.1: pip's by its version, Debian's by dpkg."""
    if info.torch_dir is None:
        return f"{info.python} cannot find a torch package"
    if info.torch_dir == debian_torch_dir and (debian_version or "").startswith(TORCH_VERSION):
        return None
    versions = [v for v in (info.version_py, info.dist_version) if v is not None]
    if versions and all(_base_version(v) == TORCH_VERSION for v in versions):
        return None
    shown = ", ".join(dict.fromkeys(versions)) or "unknown"
    return f"torch at {info.torch_dir} is version {shown}, not {TORCH_VERSION}"


def check_base_files(torch_parent: Path, entries: Sequence[ManifestEntry]) -> Optional[str]:
    """None when every file the series patches is still byte-identical to the base."""
    hashes = {entry.path: entry.base_sha256 for entry in entries}
    error = check_base_hashes(hashes, lambda path: file_digest(torch_parent / path),
                              lambda path: str(torch_parent / path))
    return error and f"{error}; refusing to touch it"


def check_not_system(info: TorchInfo) -> Optional[str]:
    """None when replacing files in the target's torch only touches a user's own venv."""
    for python in (str(info.python), info.executable):
        if fnmatch.fnmatch(python, SYSTEM_PYTHON_PATTERN):
            return f"{python} is a system interpreter; use a venv with pip's torch=={TORCH_VERSION}"
    if info.prefix == info.base_prefix:
        return f"{info.python} is not running in a venv (sys.prefix == sys.base_prefix)"
    torch_dir = str(info.torch_dir)
    if any(fnmatch.fnmatch(torch_dir, p) for p in SYSTEM_TORCH_PATTERNS):
        return f"torch at {torch_dir} is a system package; the project .venv uses the import hook instead"
    prefix = Path(os.path.realpath(info.prefix))
    if info.torch_dir is None or prefix not in info.torch_dir.parents:
        return f"torch at {torch_dir} is not inside the venv {prefix}"
    return None


def checked_target(project: Project, runner: Runner, python: Path) -> TorchInfo:
    """Probe `python` and refuse unless its torch is the 1.13.1 the series is based on."""
    info = probe_python(runner, python)
    pin = base_pin(project)
    debian_dir = Path(pin["system_torch_dir"])
    debian_version = None
    if info.torch_dir == debian_dir:
        package = pin["debian_binary_package"]
        debian_version = dpkg_versions(runner, [package]).get(package)
    raise_if(check_torch_version(info, debian_dir, debian_version))
    return info


def module_files(runner: Runner, python: Path, modules: Sequence[str], overlay_on: bool) -> Dict[str, str]:
    """Which file each module is loaded from in `python`, with the hook on or off."""
    proc = runner.run([python, "-I", "-B", "-", *modules], input=WHERE_SCRIPT, capture=True,
                      env={"PATCHSET_OVERLAY": "1" if overlay_on else "0"})
    return json.loads(proc.stdout.strip().splitlines()[-1])
