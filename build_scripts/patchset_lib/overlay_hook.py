"""The project .venv's import hook: its torch is Debian's system torch, reached through
--system-site-packages, so nothing of torch may be replaced; `patchset_overlay.py` +
`patchset_overlay.pth` in the venv's own site-packages make it load torch_overlay/ instead.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Optional, Sequence

from .common import ABSENT, PatchsetError, Project, Runner, raise_if, write_text_atomic
from .overlay import ManifestEntry, check_overlay_files, read_manifest
from .project_venv import check_project_venv
from .torch_target import check_base_files, checked_target, module_files, probe_python

HOOK_MODULE = "patchset_overlay"
HOOK_PTH_TEXT = f"import {HOOK_MODULE}\n"
FINDER_SOURCE = Path(__file__).resolve().parent / "overlay_finder.py"


def check_hook_installed(purelib: Path) -> Optional[str]:
    if not (purelib / f"{HOOK_MODULE}.pth").is_file():
        return f"the overlay hook is not installed in {purelib}: run ./build_scripts/patchset install first"
    return None


def check_overlay_hook(project: Project) -> Optional[str]:
    """The patched side of the default runtimes is the project venv with the hook (its
    site-packages found without starting its python)."""
    sites = list(project.venv.glob("lib/python*/site-packages")) or [project.venv / "lib"]
    errors = [check_hook_installed(purelib) for purelib in sites]
    return None if None in errors else errors[0]


def hook_source(overlay_root: Path, modules: Sequence[str]) -> str:
    """overlay_finder.py with OVERLAY_ROOT and MODULES filled in."""
    text = FINDER_SOURCE.read_text()
    for name, value in (("OVERLAY_ROOT", repr(str(overlay_root))), ("MODULES", repr(tuple(modules)))):
        text, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        if count != 1:
            raise PatchsetError(f"{FINDER_SOURCE}: expected one `{name} = ...` line, found {count}")
    return text


def check_hook_loads(runner: Runner, python: Path, overlay: Path, torch_dir: Path,
                     entries: Sequence[ManifestEntry]) -> Optional[str]:
    on = module_files(runner, python, [e.module for e in entries], overlay_on=True)
    # a module the series creates does not exist without the overlay
    in_base = [e for e in entries if e.base_sha256 != ABSENT]
    off = module_files(runner, python, [e.module for e in in_base], overlay_on=False)
    for entry in entries:
        want_on = os.path.realpath(overlay / entry.path)
        want_off = os.path.realpath(torch_dir.parent / entry.path)
        if on[entry.module] != want_on:
            return f"{entry.module} loads {on[entry.module]}, expected the overlay {want_on}"
        if entry in in_base and off[entry.module] != want_off:
            return f"with PATCHSET_OVERLAY=0, {entry.module} loads {off[entry.module]}, expected {want_off}"
    return None


def install_project_venv(project: Project, runner: Runner) -> None:
    """Write the import hook into the project .venv so its torch loads torch_overlay/."""
    raise_if(check_project_venv(project))
    entries = read_manifest(project)
    raise_if(check_overlay_files(project, entries))
    info = checked_target(project, runner, project.venv_python)
    assert info.torch_dir is not None
    raise_if(check_base_files(info.torch_dir.parent, entries))
    raise_if(None if project.root.resolve() in info.purelib.resolve().parents
              else f"{info.purelib} is not inside the project; refusing to write there")
    wanted = {
        info.purelib / f"{HOOK_MODULE}.py": hook_source(project.overlay.resolve(), [e.module for e in entries]),
        info.purelib / f"{HOOK_MODULE}.pth": HOOK_PTH_TEXT,
    }
    previous = {path: path.read_text() if path.exists() else None for path in wanted}
    if all(previous[path] == text for path, text in wanted.items()):
        print(f"already installed: {info.purelib / (HOOK_MODULE + '.pth')} -> {project.overlay}")
        return
    for path, text in wanted.items():
        write_text_atomic(path, text)
    try:
        error = check_hook_loads(runner, project.venv_python, project.overlay, info.torch_dir, entries)
    except PatchsetError as exc:  # e.g. `import torch` itself fails with the hook on
        error = str(exc)
    if error is not None:
        _restore_texts(previous)
        raise PatchsetError(f"installed hook does not work, rolled back: {error}")
    print(f"installed import hook into {info.purelib}")
    for entry in entries:
        print(f"  {entry.module} -> {project.overlay / entry.path}")
    print(f"PATCHSET_OVERLAY=0 {project.venv_python} runs the unpatched {info.torch_dir}")


def _restore_texts(previous: Dict[Path, Optional[str]]) -> None:
    for path, text in previous.items():
        if text is None:
            path.unlink(missing_ok=True)
        else:
            write_text_atomic(path, text)


def uninstall_project_venv(project: Project, runner: Runner) -> None:
    raise_if(check_project_venv(project))
    info = probe_python(runner, project.venv_python)
    pth, py = info.purelib / f"{HOOK_MODULE}.pth", info.purelib / f"{HOOK_MODULE}.py"
    if not pth.exists() and not py.exists():
        print(f"nothing to uninstall: no {HOOK_MODULE} hook in {info.purelib}")
        return
    if pth.exists() and pth.read_text() != HOOK_PTH_TEXT:
        raise PatchsetError(f"{pth} was not written by patchset; not removing it")
    pth.unlink(missing_ok=True)  # the .pth first: without it the module is inert
    py.unlink(missing_ok=True)
    for cached in (info.purelib / "__pycache__").glob(f"{HOOK_MODULE}.*.pyc"):
        cached.unlink()
    print(f"removed the import hook from {info.purelib}")
