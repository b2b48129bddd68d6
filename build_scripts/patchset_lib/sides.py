"""The two sides an interpreter gives, unpatched and patched: how each is told which torch
modules to load, and which file each overlaid module must then come from. For the project
.venv the import hook is switched on and off; for a venv patched by `install --python` the
patched side is the venv as installed and the unpatched side loads the pristine base files
through the hook, set up as a plugin or preload. For `upstream-tests --checkout DIR` the patched
side of either loads the overlaid modules from DIR's own torch/ files, through the same hook
pointed at DIR: what is tested is what the checkout holds, edits included.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .common import ABSENT, PatchsetError, Project, Runner, file_digest
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


CHECKOUT_HOOK_MODULE = "patchset_checkout_overlay"


def check_checkout_modules(checkout: Path, entries: Sequence[ManifestEntry]) -> Optional[str]:
    """None when the checkout holds every overlaid module and is not the unpatched base."""
    apply_hint = f"apply the series first: ./build_scripts/patchset apply --checkout {checkout}"
    for entry in entries:
        if not (checkout / entry.path).is_file():
            return f"{checkout} has no {entry.path}, which the series makes; {apply_hint}"
    if all(file_digest(checkout / e.path) == e.base_sha256 for e in entries if e.base_sha256 != ABSENT):
        return f"{checkout} holds the unpatched 1.13.1 files; {apply_hint}"
    return None


def edited_in_checkout(checkout: Path, entries: Sequence[ManifestEntry]) -> List[str]:
    """The overlaid files whose bytes in the checkout are not the overlay's (base + series)."""
    return [e.path for e in entries if file_digest(checkout / e.path) != e.result_sha256]


def checkout_side(side: Side, checkout: Path, entries: Sequence[ManifestEntry], workdir: Path) -> Side:
    """`side` (the patched one) loading the overlaid modules from the checkout's torch/ files:
    the import hook pointed at the checkout, as a pytest plugin ahead of any installed hook."""
    (workdir / f"{CHECKOUT_HOOK_MODULE}.py").write_text(
        hook_source(checkout.resolve(), [e.module for e in entries]))
    return dataclasses.replace(
        side, env={**side.env, "PATCHSET_OVERLAY": "1"}, plugins=(*side.plugins, CHECKOUT_HOOK_MODULE),
        expected={**side.expected, **{e.module: checkout / e.path for e in entries}})
