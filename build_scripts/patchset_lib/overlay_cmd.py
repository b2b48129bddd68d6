"""`patchset overlay`: write torch_overlay/ (the modified torch modules) from pristine base + series.

`torch_overlay/<in-tree path>` holds every file under torch/ that the series changes, and
`torch_overlay/MANIFEST` (committed) lists `<path> <base sha256> <result sha256>` for each, so
a stale or hand-edited overlay is detectable with `overlay --check`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from .series import patched_result
from .common import PatchsetError, Project, Runner, read_base_hashes, sha256_bytes, sha256_file


def overlay_files(result: Mapping[str, bytes], base: Mapping[str, str]) -> Dict[str, bytes]:
    """The files under torch/ that the series changes (test/ files live only in checkouts)."""
    return {
        path: data for path, data in sorted(result.items())
        if path.startswith("torch/") and sha256_bytes(data) != base[path]
    }


def manifest_text(files: Mapping[str, bytes], base: Mapping[str, str]) -> str:
    return "".join(f"{path} {base[path]} {sha256_bytes(files[path])}\n" for path in sorted(files))


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


def cmd_overlay(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    result = patched_result(project, runner)
    wanted = expected_overlay(project, runner, result)
    if args.check:
        errors = [check_overlay(project, wanted)]
        if args.checkout:
            errors.append(check_checkout(Path(args.checkout).resolve(), result))
        found = [e for e in errors if e]
        if found:
            raise PatchsetError("; ".join(found))
        where = " and " + args.checkout if args.checkout else ""
        print(f"overlay: torch_overlay/{where} match pristine base + series")
        return 0
    if args.checkout:
        raise PatchsetError("--checkout is only used with --check")
    written = write_overlay(project, wanted)
    modules = len(wanted) - 1
    if written:
        print(f"overlay: wrote {', '.join('torch_overlay/' + p for p in written)}")
    else:
        print(f"overlay: torch_overlay/ up to date ({modules} files)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "overlay", help="generate torch_overlay/ from the pristine base + series",
        description="Write torch_overlay/<path> for each torch/ file the series changes, and MANIFEST.",
    )
    parser.add_argument("--check", action="store_true",
                        help="do not write; fail naming the file if torch_overlay/ (or --checkout) is stale")
    parser.add_argument("--checkout", metavar="DIR", help="with --check: also verify this patched checkout")
    parser.set_defaults(func=cmd_overlay)
