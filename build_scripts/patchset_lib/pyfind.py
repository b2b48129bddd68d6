"""Find an interpreter of an older Python (pip's torch 1.13.1 has wheels for 3.7-3.10 only, and
upstream's pinned flake8 3.8.2 predates 3.10): pyenv's versions first, then the system's.

A search that finds nothing raises an error naming every place it looked, so a machine without
such a Python gets a clear message instead of a half-made venv.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple

from .common import PatchsetError, Runner, quiet

Version = Tuple[int, int]
# Prints "major minor" and fails unless the venv machinery is there (Debian splits it out).
PROBE = "import sys, venv, ensurepip; print(*sys.version_info[:2])"


def pyenv_root(environ: Mapping[str, str]) -> Path:
    """$PYENV_ROOT, else pyenv's default ~/.pyenv (what `pyenv root` prints)."""
    return Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def version_of_dir(name: str) -> Optional[Version]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.\d+", name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def pyenv_candidates(root: Path, wanted: Sequence[Version]) -> List[Tuple[Path, Version]]:
    """bin/python of pyenv's CPython versions in `wanted`, in the order of `wanted`."""
    versions = root / "versions"
    found = [(p, version_of_dir(p.name)) for p in sorted(versions.iterdir())] if versions.is_dir() else []
    return [(p / "bin" / "python", v) for v in wanted for p, version in found
            if version == v and (p / "bin" / "python").is_file()]


def system_candidates(path_env: str, wanted: Sequence[Version], skip: Path) -> List[Tuple[Path, Version]]:
    """`python3.N` on PATH for each wanted version, leaving out pyenv's shims (under `skip`)."""
    out: List[Tuple[Path, Version]] = []
    for major, minor in wanted:
        for directory in path_env.split(os.pathsep):
            if not directory or Path(directory).resolve().is_relative_to(skip.resolve()):
                continue
            found = shutil.which(f"python{major}.{minor}", path=directory)
            if found:
                out.append((Path(found), (major, minor)))
                break
    return out


def probe(runner: Runner, python: Path) -> Optional[Version]:
    proc = quiet(runner).run([python, "-I", "-c", PROBE], capture=True, check=False)
    parts = proc.stdout.split()
    if proc.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def describe(wanted: Sequence[Version]) -> str:
    return ", ".join(f"{a}.{b}" for a, b in wanted)


def find_python(runner: Runner, wanted: Sequence[Version], environ: Mapping[str, str],
                purpose: str) -> Path:
    """The first working interpreter of a wanted version: pyenv's, then PATH's."""
    root = pyenv_root(environ)
    candidates = pyenv_candidates(root, wanted) + system_candidates(environ.get("PATH", ""), wanted, root)
    for python, version in candidates:
        if probe(runner, python) == version:  # named for a version and really that version
            return python
    tried = ", ".join(str(python) for python, _ in candidates) or "none found"
    raise PatchsetError(
        f"{purpose} needs Python {describe(wanted)} with venv and ensurepip; looked in "
        f"{root / 'versions'}/<{describe(wanted)}>.*/bin/python (pyenv; $PYENV_ROOT) and for "
        f"python{{{describe(wanted)}}} on PATH; candidates tried: {tried}. Install one, e.g. "
        "`pyenv install 3.10`, or Debian's python3.N and python3.N-venv where packaged"
    )
