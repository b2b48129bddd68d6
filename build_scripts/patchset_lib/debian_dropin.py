"""The quilt export dropped into a Debian package's `debian/patches`, next to the package's own.

The series' patches go into a subdirectory (`fake-tensor/` by default) and their entries are
appended to the package's `series`, after every entry it already has, so `quilt push -a` applies
the package's patches first and ours on top. The package's own patches and series lines are
never changed. Idempotent: when the subdirectory already holds exactly these patches and
`series` lists them, nothing is written. Anything else under our names (a file of the same name
with other bytes, a subdirectory holding other files, only some of our entries in `series`) is
refused, naming it, before anything is written.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from .common import PatchsetError, write_text_atomic

SERIES = "series"
DEFAULT_SUBDIR = "fake-tensor"


def series_entries(text: str) -> List[str]:
    """The patch names of a quilt series file (first word of each line; `#` starts a comment)."""
    names = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            names.append(words[0])
    return names


def check_patch_dir(target: Path) -> Optional[str]:
    """None when target is a quilt patch directory: a `series` whose every entry exists."""
    if not target.is_dir():
        return f"{target} is not a directory"
    series = target / SERIES
    if not series.is_file():
        return (f"{target} has no {SERIES} file, so it is not a quilt patch directory "
                "(a `3.0 (quilt)` package's debian/patches has one; to start one: touch "
                f"{series})")
    missing = [name for name in series_entries(series.read_text()) if not (target / name).is_file()]
    if missing:
        return f"{series} lists {missing[0]}, which is not in {target}: not a usable quilt patch directory"
    return None


@dataclasses.dataclass(frozen=True)
class DropIn:
    """What a drop-in has to write: the patches (none when already there) and series lines."""

    target: Path
    subdir: str
    patches: Mapping[str, bytes]  # file name -> bytes, in series order
    write_patches: bool
    series_text: Optional[str]  # the new series, None when it already lists ours

    @property
    def entries(self) -> List[str]:
        return [f"{self.subdir}/{name}" for name in self.patches]

    @property
    def changes_nothing(self) -> bool:
        return not self.write_patches and self.series_text is None


def check_subdir(subdir: str) -> Optional[str]:
    if not subdir or subdir.startswith(".") or "/" in subdir or subdir == SERIES:
        return f"--subdir {subdir!r} must be a plain directory name"
    return None


def plan_drop_in(target: Path, subdir: str, patches: Mapping[str, bytes]) -> DropIn:
    """What dropping `patches` into target/subdir needs; PatchsetError on any collision."""
    for error in (check_subdir(subdir), check_patch_dir(target)):
        if error is not None:
            raise PatchsetError(error)
    where = target / subdir
    series_text = (target / SERIES).read_text()
    listed = series_entries(series_text)
    ours = [f"{subdir}/{name}" for name in patches]
    replace_hint = (f"to replace an earlier drop-in, remove {where} and its lines from "
                    f"{target / SERIES} first")
    others = [name for name in listed if name.startswith(f"{subdir}/") and name not in ours]
    if others:
        raise PatchsetError(f"{target / SERIES} lists {others[0]}, which is not a patch of this "
                            "series; " + replace_hint)
    if where.exists() and not where.is_dir():
        raise PatchsetError(f"{where} exists and is not a directory")
    present: Dict[str, bytes] = {}
    if where.is_dir():
        present = {p.name: p.read_bytes() for p in where.iterdir()}
        foreign = sorted(set(present) - set(patches))
        if foreign:
            raise PatchsetError(f"{where} holds {foreign[0]}, which is not a patch of this series; "
                                + replace_hint)
        differing = [name for name, data in patches.items() if name in present and present[name] != data]
        if differing:
            raise PatchsetError(f"{where / differing[0]} exists with other contents; " + replace_hint)
    mine = [name for name in listed if name in ours]
    if mine and mine != ours:
        raise PatchsetError(f"{target / SERIES} lists only some of this series' patches, or in "
                            f"another order ({len(mine)} of {len(ours)}); " + replace_hint)
    new_series = None
    if not mine:
        head = series_text if not series_text or series_text.endswith("\n") else series_text + "\n"
        new_series = head + "".join(f"{entry}\n" for entry in ours)
    return DropIn(target, subdir, dict(patches), present != dict(patches), new_series)


def write_drop_in(plan: DropIn) -> None:
    """The patches first (complete in a temp dir, then renamed into place), then series."""
    where = plan.target / plan.subdir
    if plan.write_patches:
        staging = plan.target / f".{plan.subdir}.patchset-tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name, data in plan.patches.items():
            (staging / name).write_bytes(data)
        if where.is_dir():  # holds a subset of ours with the same bytes (checked by the plan)
            shutil.rmtree(where)
        os.replace(staging, where)
    if plan.series_text is not None:
        write_text_atomic(plan.target / SERIES, plan.series_text)
