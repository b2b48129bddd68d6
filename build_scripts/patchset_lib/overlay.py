"""torch_overlay/ (the modified torch modules) and its MANIFEST: computed from pristine base +
series, written, read and checked.

`torch_overlay/<in-tree path>` holds every file under torch/ that the series changes, and
`torch_overlay/MANIFEST` (committed) lists `<path> <base sha256> <result sha256>` for each (base
`absent` for a file the series creates), so a stale or hand-edited overlay is detectable with
`overlay --check`.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .common import ABSENT, PatchsetError, Project, Runner, read_base_hashes, sha256_bytes, sha256_file
from .series import patched_result


@dataclasses.dataclass(frozen=True)
class ManifestEntry:
    """One overlay file: in-tree path (torch/...), hash of its base and of the patched result."""

    path: str
    base_sha256: str
    result_sha256: str

    @property
    def module(self) -> str:
        return module_name(self.path)


def module_name(path: str) -> str:
    """Dotted name of a torch/....py path; a package's `__init__.py` stands for the package."""
    stem = path[: -len(".py")]
    if stem.endswith("/__init__"):
        stem = stem[: -len("/__init__")]
    return stem.replace("/", ".")


def overlay_files(result: Mapping[str, bytes], base: Mapping[str, str]) -> Dict[str, bytes]:
    """The files under torch/ that the series changes or creates (test/ files live only in
    checkouts)."""
    return {
        path: data for path, data in sorted(result.items())
        if path.startswith("torch/") and sha256_bytes(data) != base.get(path, ABSENT)
    }


def manifest_text(files: Mapping[str, bytes], base: Mapping[str, str]) -> str:
    return "".join(f"{path} {base.get(path, ABSENT)} {sha256_bytes(files[path])}\n"
                   for path in sorted(files))


def manifest_paths(text: str) -> List[str]:
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def expected_overlay(project: Project, runner: Runner,
                     result: Optional[Mapping[str, bytes]] = None) -> Dict[str, bytes]:
    """Every overlay file plus MANIFEST (key "MANIFEST"), as bytes, computed from pristine + series."""
    base = read_base_hashes(project)
    result = patched_result(project, runner) if result is None else result
    files = overlay_files(result, base)
    return {**files, "MANIFEST": manifest_text(files, base).encode()}


def write_overlay(project: Project, wanted: Mapping[str, bytes]) -> List[str]:
    """Write what differs, remove files an older MANIFEST listed; returns the paths written."""
    old_manifest = project.overlay_manifest
    stale = set(manifest_paths(old_manifest.read_text())) if old_manifest.is_file() else set()
    stale -= set(wanted)
    for path in sorted(stale):
        target = project.overlay / path
        if target.is_file():
            target.unlink()
    written: List[str] = []
    for path, data in sorted(wanted.items()):
        target = project.overlay / path
        if target.is_file() and target.read_bytes() == data:
            continue  # keep mtimes (and .pyc caches) of unchanged files
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(path)
    return written


def check_overlay(project: Project, wanted: Mapping[str, bytes]) -> Optional[str]:
    """None when torch_overlay/ holds exactly `wanted` (files listed, bytes equal, MANIFEST current)."""
    for path, data in sorted(wanted.items(), key=lambda item: item[0] == "MANIFEST"):
        target = project.overlay / path
        if not target.is_file():
            return f"torch_overlay/{path} is missing (run `patchset overlay`)"
        if target.read_bytes() != data:
            what = "is stale" if path == "MANIFEST" else "differs from pristine base + series"
            return f"torch_overlay/{path} {what} (run `patchset overlay`)"
    return None


def check_checkout(checkout: Path, result: Mapping[str, bytes]) -> Optional[str]:
    """None when every base file (torch/ and test/) in `checkout` is the patched result."""
    for path, data in sorted(result.items()):
        target = checkout / path
        if not target.is_file():
            return f"{target} is missing"
        if sha256_file(target) != sha256_bytes(data):
            return f"{target} differs from pristine base + series"
    return None


def overlay_state(project: Project, runner: Runner) -> str:
    """"fresh", "stale: <why>" or "missing", for `status`."""
    if not project.overlay_manifest.is_file():
        return "missing"
    error = check_overlay(project, expected_overlay(project, runner))
    return "fresh" if error is None else f"stale: {error}"


def ensure_overlay(project: Project, runner: Runner) -> List[str]:
    return write_overlay(project, expected_overlay(project, runner))


def _is_sha256(token: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{64}", token) is not None


def parse_manifest(text: str, where: str = "MANIFEST") -> List[ManifestEntry]:
    """Lines `<in-tree path> <base sha256> <result sha256>` (as `overlay` writes them)."""
    entries: List[ManifestEntry] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        tokens = line.split()
        if len(tokens) != 3 or not (_is_sha256(tokens[1]) or tokens[1] == ABSENT) \
                or not _is_sha256(tokens[2]):
            raise PatchsetError(f"{where}:{number}: expected `<path> <base sha256> <result sha256>`")
        path = tokens[0]
        if not (path.startswith("torch/") and path.endswith(".py")) or path == "torch/__init__.py":
            raise PatchsetError(f"{where}:{number}: {path} is not a torch/ module the hook can overlay")
        entries.append(ManifestEntry(path, tokens[1], tokens[2]))
    if not entries:
        raise PatchsetError(f"{where} lists no torch/ module")
    return entries


def read_manifest(project: Project) -> List[ManifestEntry]:
    if not project.overlay_manifest.is_file():
        raise PatchsetError(
            f"no overlay manifest {project.overlay_manifest}: run ./build_scripts/patchset overlay first"
        )
    return parse_manifest(project.overlay_manifest.read_text(), str(project.overlay_manifest))


def check_overlay_files(project: Project, entries: Sequence[ManifestEntry]) -> Optional[str]:
    """None when every overlay file MANIFEST lists has the result hash it records."""
    for entry in entries:
        file = project.overlay / entry.path
        if not file.is_file():
            return f"overlay file {file} is missing: run ./build_scripts/patchset overlay first"
        if sha256_file(file) != entry.result_sha256:
            return f"overlay file {file} does not match MANIFEST: run ./build_scripts/patchset overlay first"
    return None
