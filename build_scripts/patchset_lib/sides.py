"""The two sides an interpreter gives, unpatched and patched: how each is told which torch
modules to load, and which file each overlaid module must then come from. For the project
.venv the import hook is switched on and off; for a venv patched by `install --python` the
patched side is the venv as installed and the unpatched side loads the pristine base files
through the hook, set up as a plugin or preload.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

from .common import PatchsetError, Project, Runner
from .overlay import ManifestEntry
from .overlay_hook import HOOK_MODULE, check_hook_installed, hook_source
from .pip_torch import check_installed_hashes
from .torch_target import probe_python

SIDES = ("unpatched", "patched")


def expected_files(side: str, overlay: Path, torch_dir: Path,
                   entries: Sequence[ManifestEntry]) -> Dict[str, Path]:
    files = {"torch": torch_dir / "__init__.py"}
    root = overlay if side == "patched" else torch_dir.parent
    files.update({e.module: root / e.path for e in entries})
    return files


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison: which interpreter, how it is told which torch to load, and
    which file each overlaid module must then come from."""

    name: str  # "unpatched" | "patched"
    python: Path
    env: Mapping[str, str]
    plugins: Tuple[str, ...]
    expected: Mapping[str, Path]


def venv_sides(project: Project, torch_dir: Path, entries: Sequence[ManifestEntry]) -> List[Side]:
    """The project .venv, with its import hook on (patched) and off (unpatched)."""
    return [Side(name, project.venv_python, {"PATCHSET_OVERLAY": "1" if name == "patched" else "0"}, (),
                 expected_files(name, project.overlay, torch_dir, entries)) for name in SIDES]


def installed_sides(project: Project, python: Path, torch_dir: Path, entries: Sequence[ManifestEntry],
                    workdir: Path) -> List[Side]:
    """A venv whose torch files `install --python` replaced: patched as it is; unpatched with
    the import hook, loaded as a pytest plugin, pointed at the pristine base files instead."""
    (workdir / f"{HOOK_MODULE}.py").write_text(
        hook_source(project.pristine.resolve(), [e.module for e in entries]))
    torch_files = {"torch": torch_dir / "__init__.py"}
    return [
        Side("unpatched", python, {"PATCHSET_OVERLAY": "1"}, (HOOK_MODULE,),
             {**torch_files, **{e.module: project.pristine / e.path for e in entries}}),
        Side("patched", python, {"PATCHSET_OVERLAY": "0"}, (),
             {**torch_files, **{e.module: torch_dir.parent / e.path for e in entries}}),
    ]


def checked_torch_dir(project: Project, runner: Runner, python: Path,
                      entries: Sequence[ManifestEntry]) -> Path:
    """torch/ of `python`, refusing what cannot give a patched side (see the two kinds of sides)."""
    info = probe_python(runner, python)
    if info.torch_dir is None:
        raise PatchsetError(f"{python} cannot find torch")
    if python == project.venv_python:
        error = check_hook_installed(info.purelib)
    else:
        error = check_installed_hashes(info.torch_dir.parent, entries)
        if error is not None:
            error += f": run ./build_scripts/patchset install --python {python} first"
    if error is not None:
        raise PatchsetError(error)
    return info.torch_dir
