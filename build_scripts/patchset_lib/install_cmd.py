"""`install` / `uninstall`: make a venv's torch load the patched modules of torch_overlay/.

Two targets:
- the project `.venv` (default): its torch is Debian's system torch, reached through
  --system-site-packages, so nothing of torch may be replaced; we write an import hook
  (`patchset_overlay.py` + `patchset_overlay.pth`) into the venv's own site-packages.
- `--python PATH` of a user's venv with pip's torch 1.13.1: its torch is a private copy, so
  the overlay files replace the originals, which are backed up into the project first.

Every check runs before the first byte is written; a refusal changes nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .common import PatchsetError, Project, Runner, base_pin, sha256_bytes, sha256_file
from .overlay import ManifestEntry, check_overlay_files, read_manifest

TORCH_VERSION = "1.13.1"
HOOK_MODULE = "patchset_overlay"
HOOK_PTH_TEXT = f"import {HOOK_MODULE}\n"
FINDER_SOURCE = Path(__file__).resolve().parent / "overlay_finder.py"
BACKUP_RECORD = "record.json"

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


def dpkg_version(runner: Runner, package: str) -> Optional[str]:
    try:
        proc = runner.run(["dpkg-query", "-W", "-f=${Version}", package], capture=True, check=False)
    except FileNotFoundError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


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
    for entry in entries:
        file = torch_parent / entry.path
        if not file.is_file():
            return f"{file} is missing"
        if sha256_file(file) != entry.base_sha256:
            return f"{file} differs from the 1.13.1 base (sha256 mismatch); refusing to touch it"
    return None


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


def check_project_venv(project: Project) -> Optional[str]:
    if not project.venv_python.exists():
        return f"no project venv at {project.venv}: run ./build_scripts/patchset setup first"
    return None


def _raise_if(error: Optional[str]) -> None:
    if error is not None:
        raise PatchsetError(error)


def checked_target(project: Project, runner: Runner, python: Path) -> TorchInfo:
    """Probe `python` and refuse unless its torch is the 1.13.1 the series is based on."""
    info = probe_python(runner, python)
    pin = base_pin(project)
    debian_dir = Path(pin["system_torch_dir"])
    debian_version = None
    if info.torch_dir == debian_dir:
        debian_version = dpkg_version(runner, pin["debian_binary_package"])
    _raise_if(check_torch_version(info, debian_dir, debian_version))
    return info


def module_files(runner: Runner, python: Path, modules: Sequence[str], overlay_on: bool) -> Dict[str, str]:
    """Which file each module is loaded from in `python`, with the hook on or off."""
    proc = runner.run([python, "-I", "-B", "-", *modules], input=WHERE_SCRIPT, capture=True,
                      env={"PATCHSET_OVERLAY": "1" if overlay_on else "0"})
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- project venv: the import hook ------------------------------------------------------

def hook_source(overlay_root: Path, modules: Sequence[str]) -> str:
    """overlay_finder.py with OVERLAY_ROOT and MODULES filled in."""
    text = FINDER_SOURCE.read_text()
    for name, value in (("OVERLAY_ROOT", repr(str(overlay_root))), ("MODULES", repr(tuple(modules)))):
        text, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        if count != 1:
            raise PatchsetError(f"{FINDER_SOURCE}: expected one `{name} = ...` line, found {count}")
    return text


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".patchset-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def check_hook_loads(runner: Runner, python: Path, overlay: Path, torch_dir: Path,
                     entries: Sequence[ManifestEntry]) -> Optional[str]:
    modules = [e.module for e in entries]
    on = module_files(runner, python, modules, overlay_on=True)
    off = module_files(runner, python, modules, overlay_on=False)
    for entry in entries:
        want_on = os.path.realpath(overlay / entry.path)
        want_off = os.path.realpath(torch_dir.parent / entry.path)
        if on[entry.module] != want_on:
            return f"{entry.module} loads {on[entry.module]}, expected the overlay {want_on}"
        if off[entry.module] != want_off:
            return f"with PATCHSET_OVERLAY=0, {entry.module} loads {off[entry.module]}, expected {want_off}"
    return None


def install_project_venv(project: Project, runner: Runner) -> None:
    """Write the import hook into the project .venv so its torch loads torch_overlay/."""
    _raise_if(check_project_venv(project))
    entries = read_manifest(project)
    _raise_if(check_overlay_files(project, entries))
    info = checked_target(project, runner, project.venv_python)
    assert info.torch_dir is not None
    _raise_if(check_base_files(info.torch_dir.parent, entries))
    _raise_if(None if project.root.resolve() in info.purelib.resolve().parents
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
        _write_text_atomic(path, text)
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
            _write_text_atomic(path, text)


def uninstall_project_venv(project: Project, runner: Runner) -> None:
    _raise_if(check_project_venv(project))
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


# --- a user's venv with pip's torch: replace files, keep a backup --------------------------

def backup_dir(project: Project, site_packages: Path) -> Path:
    return project.cache / "backups" / sha256_bytes(str(site_packages).encode())


def _read_record(directory: Path) -> Optional[dict]:
    record = directory / BACKUP_RECORD
    return json.loads(record.read_text()) if record.is_file() else None


def check_backup(directory: Path, record: dict) -> Optional[str]:
    for item in record["files"]:
        saved = directory / "files" / item["path"]
        if not saved.is_file() or sha256_file(saved) != item["original_sha256"]:
            return f"backup {saved} is missing or damaged; cannot restore {item['target']}"
    return None


def _replace_file(source: Path, target: Path) -> None:
    """Copy `source` over `target` atomically, keeping the target's permission bits."""
    tmp = target.with_name(target.name + ".patchset-tmp")
    shutil.copyfile(source, tmp)
    if target.exists():
        shutil.copymode(target, tmp)
    os.replace(tmp, target)


def _write_overlay_files(project: Project, site_packages: Path, entries: Sequence[ManifestEntry],
                         restore_from: Path) -> None:
    done: List[ManifestEntry] = []
    try:
        for entry in entries:
            _replace_file(project.overlay / entry.path, site_packages / entry.path)
            done.append(entry)
    except OSError:
        for entry in done:
            _replace_file(restore_from / "files" / entry.path, site_packages / entry.path)
        raise


def install_into_python(project: Project, runner: Runner, python: Path) -> None:
    entries = read_manifest(project)
    _raise_if(check_overlay_files(project, entries))
    info = checked_target(project, runner, python)
    _raise_if(check_not_system(info))
    assert info.torch_dir is not None
    site_packages = info.torch_dir.parent
    backups = backup_dir(project, site_packages)
    record = _read_record(backups)
    current = {e.path: sha256_file(site_packages / e.path) for e in entries
               if (site_packages / e.path).is_file()}
    if record is not None:
        update_from_previous_install(project, backups, record, site_packages, entries, current)
        return
    _raise_if(check_base_files(site_packages, entries))
    shutil.rmtree(backups, ignore_errors=True)  # a half-written backup from a crash, never a record
    for entry in entries:
        saved = backups / "files" / entry.path
        saved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site_packages / entry.path, saved)
    record = {
        "python": str(python),
        "site_packages": str(site_packages),
        "files": [
            {"path": e.path, "target": str(site_packages / e.path),
             "original_sha256": e.base_sha256, "installed_sha256": e.result_sha256}
            for e in entries
        ],
    }
    _raise_if(check_backup(backups, record))
    _write_text_atomic(backups / BACKUP_RECORD, json.dumps(record, indent=2) + "\n")
    try:
        _write_overlay_files(project, site_packages, entries, backups)
    except OSError as exc:  # originals already put back by _write_overlay_files
        shutil.rmtree(backups)
        raise PatchsetError(f"writing into {site_packages} failed, originals restored: {exc}") from exc
    _raise_if(check_installed_hashes(site_packages, entries))
    print(f"installed the overlay into {site_packages} (originals backed up in {backups})")
    for entry in entries:
        print(f"  replaced {site_packages / entry.path}")


def check_installed_hashes(site_packages: Path, entries: Sequence[ManifestEntry]) -> Optional[str]:
    for entry in entries:
        if sha256_file(site_packages / entry.path) != entry.result_sha256:
            return f"{site_packages / entry.path} does not match the overlay after writing"
    return None


def update_from_previous_install(project: Project, backups: Path, record: dict, site_packages: Path,
                                 entries: Sequence[ManifestEntry], current: Dict[str, str]) -> None:
    """A backup exists: no-op when already current, else swap in a newer overlay."""
    recorded = {item["path"]: item for item in record["files"]}
    if set(recorded) != {e.path for e in entries} or any(
        recorded[e.path]["original_sha256"] != e.base_sha256 for e in entries
    ):
        raise PatchsetError(f"{backups} records other files or bases than the overlay; uninstall first")
    _raise_if(check_backup(backups, record))
    if all(current.get(e.path) == e.result_sha256 for e in entries):
        print(f"already installed: {site_packages} has the current overlay; nothing to do")
        return
    for entry in entries:
        ours = (recorded[entry.path]["installed_sha256"], entry.base_sha256)
        if current.get(entry.path) not in ours:
            raise PatchsetError(
                f"{site_packages / entry.path} changed since patchset installed it; "
                "reinstall torch or run uninstall first"
            )
    _write_overlay_files(project, site_packages, entries, backups)
    _raise_if(check_installed_hashes(site_packages, entries))
    for item in record["files"]:
        item["installed_sha256"] = next(e.result_sha256 for e in entries if e.path == item["path"])
    _write_text_atomic(backups / BACKUP_RECORD, json.dumps(record, indent=2) + "\n")
    print(f"updated the overlay in {site_packages} to the current torch_overlay/")


def uninstall_from_python(project: Project, runner: Runner, python: Path) -> None:
    info = probe_python(runner, python)
    _raise_if(check_not_system(info))
    assert info.torch_dir is not None
    site_packages = info.torch_dir.parent
    backups = backup_dir(project, site_packages)
    record = _read_record(backups)
    if record is None:
        print(f"nothing to uninstall: patchset has no backup for {site_packages}")
        return
    _raise_if(check_backup(backups, record))
    for item in record["files"]:
        target = Path(item["target"])
        now = sha256_file(target) if target.is_file() else None
        if now not in (item["installed_sha256"], item["original_sha256"]):
            raise PatchsetError(f"{target} changed since patchset installed it; not overwriting it")
    for item in record["files"]:
        target = Path(item["target"])
        if sha256_file(target) != item["original_sha256"]:
            _replace_file(backups / "files" / item["path"], target)
            shutil.copystat(backups / "files" / item["path"], target)
        if sha256_file(target) != item["original_sha256"]:
            raise PatchsetError(f"restoring {target} failed; the backup stays in {backups}")
    shutil.rmtree(backups)
    print(f"restored the original torch files in {site_packages}; removed {backups}")


# --- command line ---------------------------------------------------------------------------

def _python_arg(project: Project, args: argparse.Namespace) -> Optional[Path]:
    """The --python target, or None for the project venv (also when --python names it)."""
    if args.python is None:
        return None
    python = Path(os.path.abspath(os.path.expanduser(args.python)))  # no realpath: venv pythons are symlinks
    if python == Path(os.path.abspath(project.venv_python)):
        return None
    if not python.exists():
        raise PatchsetError(f"no interpreter at {python}")
    return python


def _on_target(project: Project, runner: Runner, args: argparse.Namespace,
               on_venv: Callable[[Project, Runner], None],
               on_python: Callable[[Project, Runner, Path], None]) -> int:
    """`on_venv` for the project .venv, `on_python` for another --python interpreter."""
    python = _python_arg(project, args)
    if python is None:
        on_venv(project, runner)
    else:
        on_python(project, runner, python)
    return 0


def cmd_install(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    return _on_target(project, runner, args, install_project_venv, install_into_python)


def cmd_uninstall(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    return _on_target(project, runner, args, uninstall_project_venv, uninstall_from_python)


def register(subparsers: argparse._SubParsersAction) -> None:
    python_help = ("interpreter of a venv with pip's torch==1.13.1 whose torch modules of the "
                   "overlay MANIFEST get replaced (originals backed up in .cache/backups/); default: the project .venv, "
                   "which gets an import hook instead")
    install = subparsers.add_parser("install", help="make a venv's torch load the patched overlay")
    install.add_argument("--python", metavar="PATH", help=python_help)
    install.set_defaults(func=cmd_install)
    uninstall = subparsers.add_parser("uninstall", help="undo install (byte-exact restore)")
    uninstall.add_argument("--python", metavar="PATH", help=python_help)
    uninstall.set_defaults(func=cmd_uninstall)
