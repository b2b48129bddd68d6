"""A user's venv with pip's torch 1.13.1: its torch is a private copy, so the overlay files
replace the originals, which are backed up into the project first (.cache/backups/) and
restored byte for byte by uninstall.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .common import (ABSENT, PatchsetError, Project, Runner, file_digest, raise_if, sha256_bytes,
                     write_text_atomic)
from .overlay import ManifestEntry, check_overlay_files, read_manifest
from .torch_target import check_base_files, check_not_system, checked_target, probe_python

BACKUP_RECORD = "record.json"


def backup_dir(project: Project, site_packages: Path) -> Path:
    return project.cache / "backups" / sha256_bytes(str(site_packages).encode())


def _read_record(directory: Path) -> Optional[dict]:
    record = directory / BACKUP_RECORD
    return json.loads(record.read_text()) if record.is_file() else None


def check_backup(directory: Path, record: dict) -> Optional[str]:
    for item in record["files"]:
        saved = directory / "files" / item["path"]
        if item["original_sha256"] == ABSENT:  # a file the overlay creates: nothing saved
            continue
        if not saved.is_file() or file_digest(saved) != item["original_sha256"]:
            return f"backup {saved} is missing or damaged; cannot restore {item['target']}"
    return None


def _replace_file(source: Path, target: Path) -> None:
    """Copy `source` over `target` atomically, keeping the target's permission bits."""
    tmp = target.with_name(target.name + ".patchset-tmp")
    shutil.copyfile(source, tmp)
    if target.exists():
        shutil.copymode(target, tmp)
    os.replace(tmp, target)


def _restore_file(backups: Path, path: str, original_sha256: str, target: Path) -> None:
    """Put back what `target` was before install: its saved copy, or no file."""
    if original_sha256 == ABSENT:
        if target.exists():
            target.unlink()
        return
    _replace_file(backups / "files" / path, target)
    shutil.copystat(backups / "files" / path, target)


def _write_overlay_files(project: Project, site_packages: Path, entries: Sequence[ManifestEntry],
                         restore_from: Path) -> None:
    done: List[ManifestEntry] = []
    try:
        for entry in entries:
            _replace_file(project.overlay / entry.path, site_packages / entry.path)
            done.append(entry)
    except OSError:
        for entry in done:
            _restore_file(restore_from, entry.path, entry.base_sha256, site_packages / entry.path)
        raise


def install_into_python(project: Project, runner: Runner, python: Path) -> None:
    entries = read_manifest(project)
    raise_if(check_overlay_files(project, entries))
    info = checked_target(project, runner, python)
    raise_if(check_not_system(info))
    assert info.torch_dir is not None
    site_packages = info.torch_dir.parent
    backups = backup_dir(project, site_packages)
    record = _read_record(backups)
    current = {e.path: file_digest(site_packages / e.path) for e in entries}
    if record is not None:
        update_from_previous_install(project, backups, record, site_packages, entries, current)
        return
    raise_if(check_base_files(site_packages, entries))
    shutil.rmtree(backups, ignore_errors=True)  # a half-written backup from a crash, never a record
    for entry in entries:
        if entry.base_sha256 == ABSENT:
            continue
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
    raise_if(check_backup(backups, record))
    write_text_atomic(backups / BACKUP_RECORD, json.dumps(record, indent=2) + "\n")
    try:
        _write_overlay_files(project, site_packages, entries, backups)
    except OSError as exc:  # originals already put back by _write_overlay_files
        shutil.rmtree(backups)
        raise PatchsetError(f"writing into {site_packages} failed, originals restored: {exc}") from exc
    raise_if(check_installed_hashes(site_packages, entries))
    print(f"installed the overlay into {site_packages} (originals backed up in {backups})")
    for entry in entries:
        print(f"  replaced {site_packages / entry.path}")


def check_installed_hashes(site_packages: Path, entries: Sequence[ManifestEntry]) -> Optional[str]:
    for entry in entries:
        if file_digest(site_packages / entry.path) != entry.result_sha256:
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
    raise_if(check_backup(backups, record))
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
    raise_if(check_installed_hashes(site_packages, entries))
    for item in record["files"]:
        item["installed_sha256"] = next(e.result_sha256 for e in entries if e.path == item["path"])
    write_text_atomic(backups / BACKUP_RECORD, json.dumps(record, indent=2) + "\n")
    print(f"updated the overlay in {site_packages} to the current torch_overlay/")


def uninstall_from_python(project: Project, runner: Runner, python: Path) -> None:
    info = probe_python(runner, python)
    raise_if(check_not_system(info))
    assert info.torch_dir is not None
    site_packages = info.torch_dir.parent
    backups = backup_dir(project, site_packages)
    record = _read_record(backups)
    if record is None:
        print(f"nothing to uninstall: patchset has no backup for {site_packages}")
        return
    raise_if(check_backup(backups, record))
    for item in record["files"]:
        target = Path(item["target"])
        if file_digest(target) not in (item["installed_sha256"], item["original_sha256"]):
            raise PatchsetError(f"{target} changed since patchset installed it; not overwriting it")
    for item in record["files"]:
        target = Path(item["target"])
        if file_digest(target) != item["original_sha256"]:
            _restore_file(backups, item["path"], item["original_sha256"], target)
        if file_digest(target) != item["original_sha256"]:
            raise PatchsetError(f"restoring {target} failed; the backup stays in {backups}")
    shutil.rmtree(backups)
    print(f"restored the original torch files in {site_packages}; removed {backups}")
