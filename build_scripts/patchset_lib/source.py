"""Fetch the pinned Debian source package and lay out the checkout and the pristine base files.

The machine's apt configuration has binary (`deb`) entries only, and system apt sources are
never edited: we derive `deb-src` entries from them into a PRIVATE apt state under
`.cache/debian-source/` and point apt-get at it with `-o Dir::...` options.
Only the orig tarball is used (the Debian tarball is not needed and may not download); it is
verified against `patches/base.json` before anything is extracted from it.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .common import (
    ABSENT,
    PatchsetError,
    Project,
    Runner,
    base_pin,
    check_base_hashes,
    check_out_dir,
    file_digest,
    raise_if,
    read_base_hashes,
    sha256_file,
)

SYSTEM_SOURCE_LIST = Path("/etc/apt/sources.list")
SYSTEM_SOURCE_PARTS = Path("/etc/apt/sources.list.d")


# --- deriving deb-src entries -------------------------------------------------------------

def deb822_to_deb_src(text: str) -> List[str]:
    """Stanzas of a deb822 `.sources` file that carry `deb`, rewritten as `Types: deb-src`.

    Disabled stanzas (`Enabled: no`) are dropped; comments are kept only inside stanzas.
    """
    stanzas: List[str] = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        fields = _deb822_fields(lines)
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").strip().lower() == "no":
            continue
        out = [
            "Types: deb-src" if line.lower().startswith("types:") else line
            for line in lines
        ]
        stanzas.append("\n".join(out) + "\n")
    return stanzas


def _deb822_fields(lines: List[str]) -> Dict[str, str]:
    fields: Dict[str, str] = {}
    for line in lines:
        if line.startswith("#") or line[:1].isspace() or ":" not in line:
            continue
        key, value = line.split(":", 1)
        fields[key.strip().lower()] = value.strip()
    return fields


def one_line_to_deb_src(text: str) -> List[str]:
    """`deb [opts] URI suite comp...` lines of a `.list` file, rewritten as `deb-src` lines."""
    out: List[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("deb ") or stripped.startswith("deb\t"):
            out.append("deb-src" + stripped[3:])
    return out


def derive_deb_src(source_list: Path, source_parts: Path) -> Tuple[List[str], List[str]]:
    """(deb822 stanzas, one-line entries) of deb-src derived from the machine's apt sources."""
    stanzas: List[str] = []
    lines: List[str] = []
    if source_list.is_file():
        lines += one_line_to_deb_src(source_list.read_text())
    if source_parts.is_dir():
        # apt reads only these two extensions; `*.disabled` and friends are ignored, as by apt.
        for path in sorted(source_parts.iterdir()):
            if path.suffix == ".sources" and path.is_file():
                stanzas += deb822_to_deb_src(path.read_text())
            elif path.suffix == ".list" and path.is_file():
                lines += one_line_to_deb_src(path.read_text())
    return stanzas, lines


# --- private apt state --------------------------------------------------------------------

def apt_state_dir(project: Project) -> Path:
    return project.source_cache / "apt"


def apt_options_in(state: Path) -> List[str]:
    """apt-get options that confine every read and write to the private apt state `state`."""
    return [
        "-o", f"Dir::Etc::SourceList={state / 'empty.list'}",
        "-o", f"Dir::Etc::SourceParts={state / 'sources.list.d'}",
        "-o", f"Dir::State::Lists={state / 'lists'}",
        # The package caches would otherwise be rebuilt in /var/cache/apt from our lists.
        "-o", f"Dir::Cache={state / 'cache'}",
        # Downloads land in root-owned cache dirs the _apt sandbox user cannot write to.
        "-o", "APT::Sandbox::User=root",
    ]


def write_apt_state_in(state: Path, stanzas: List[str], lines: List[str]) -> bool:
    """Write deb-src `stanzas`/`lines` as the private apt state `state`; True when it changed."""
    if not stanzas and not lines:
        raise PatchsetError(
            f"no `deb` entries in {SYSTEM_SOURCE_LIST} or {SYSTEM_SOURCE_PARTS}/ to derive deb-src from"
        )
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    wanted = {
        state / "empty.list": "",
        state / "sources.list.d" / "derived-deb-src.sources": "\n".join(stanzas),
        state / "sources.list.d" / "derived-deb-src.list": "".join(line + "\n" for line in lines),
    }
    changed = False
    for path, text in wanted.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed = True
    return changed


def has_lists_in(state: Path) -> bool:
    lists = state / "lists"
    return lists.is_dir() and any(p.name.endswith(("Sources", "Sources.lz4", "Sources.xz", "Sources.gz"))
                                  for p in lists.iterdir())


def private_apt(runner: Runner, state: Path, stanzas: List[str], lines: List[str]) -> List[str]:
    """The apt-get options of the private apt state `state` with these deb-src entries, its
    source lists updated when the entries changed or were never fetched."""
    opts = apt_options_in(state)
    if write_apt_state_in(state, stanzas, lines) or not has_lists_in(state):
        runner.run(["apt-get", *opts, "update"])
    return opts


# --- the orig tarball ---------------------------------------------------------------------

def tarball_path(project: Project) -> Path:
    return project.source_cache / base_pin(project)["orig_tarball"]


def check_tarball(path: Path, expected_sha256: str, pinned_in: str = "patches/base.json") -> Optional[str]:
    if not path.is_file():
        return f"{path.name} is not downloaded"
    actual = sha256_file(path)
    if actual != expected_sha256:
        return f"{path} has sha256 {actual}, expected {expected_sha256} ({pinned_in})"
    return None


def download_source(project: Project, runner: Runner) -> None:
    """apt-get source --download-only of the pinned version through the private apt state."""
    pin = base_pin(project)
    spec = f"{pin['debian_source_package']}={pin['debian_source_version']}"
    opts = private_apt(runner, apt_state_dir(project), *derive_deb_src(SYSTEM_SOURCE_LIST, SYSTEM_SOURCE_PARTS))
    # The Debian tarball of this version may be missing on the mirror: apt then fails after
    # fetching the orig tarball, so the verdict is the orig tarball's hash, not apt's exit code.
    proc = runner.run(["apt-get", *opts, "source", "--download-only", "--tar-only", spec],
                      cwd=project.source_cache, check=False, capture=True)
    runner.run(["apt-get", *opts, "source", "--download-only", "--dsc-only", spec],
               cwd=project.source_cache, check=False, capture=True)
    error = check_tarball(tarball_path(project), pin["orig_tarball_sha256"])
    if error:
        raise PatchsetError(f"fetching {spec} failed: {error}\n{(proc.stderr or '').strip()}")


def ensure_tarball(project: Project, runner: Runner) -> Path:
    path = tarball_path(project)
    pin = base_pin(project)
    if check_tarball(path, pin["orig_tarball_sha256"]) is None:
        return path
    project.source_cache.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()  # a truncated or foreign file would otherwise be kept by apt
    print(f"source: fetching {pin['orig_tarball']} through a private apt state", flush=True)
    download_source(project, runner)
    return path


# --- checkout and pristine files ----------------------------------------------------------

def extract_tree(runner: Runner, tarball: Path, top: str, target: Path) -> Path:
    """The tarball's top directory `top` as `target` (absent or an empty directory). Extracted
    beside it and renamed, so an interrupted run leaves no half tree."""
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"source: extracting {tarball.name} into {target}", flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".extract-") as tmp:
        runner.run(["tar", "-xJf", tarball, "-C", tmp, "--no-same-owner"])
        extracted = Path(tmp) / top
        if not extracted.is_dir():
            raise PatchsetError(f"{tarball.name} has no top directory {top}/")
        extracted.rename(target)
    return target


def ensure_extracted(project: Project, runner: Runner, target: Path) -> Path:
    """Extract the verified orig tarball as target (a tree of the tool's cache) unless it is there."""
    if target.is_dir():
        return target
    return extract_tree(runner, ensure_tarball(project, runner), base_pin(project)["tree_dir"], target)


def ensure_checkout(project: Project, runner: Runner) -> Path:
    return ensure_extracted(project, runner, project.default_checkout)


def write_pristine_tree(project: Project, runner: Runner, dest: Path) -> Path:
    """A pristine v1.13.1 tree at dest (absent or empty), from the verified orig tarball, its
    base files checked against patches/base.sha256."""
    raise_if(check_out_dir(dest))
    extract_tree(runner, ensure_tarball(project, runner), base_pin(project)["tree_dir"], dest)
    raise_if(check_base_hashes(read_base_hashes(project), lambda path: file_digest(dest / path),
                               lambda path: str(dest / path)))
    return dest


def check_pristine(project: Project) -> Optional[str]:
    """None when every base file is in .cache/pristine with its pinned hash."""
    for path, digest in sorted(read_base_hashes(project).items()):
        copy = project.pristine / path
        if digest != ABSENT and not copy.is_file():
            return f"pristine copy of {path} is missing"
        if file_digest(copy) != digest:
            return f"pristine copy {copy} does not match patches/base.sha256"
    return None


def ensure_pristine(project: Project, runner: Runner) -> None:
    """Copy each base file into .cache/pristine/, from the checkout if pristine there (extracted
    if missing), else the tarball."""
    fill_pristine(project, runner, ensure_checkout(project, runner))


def ensure_base_files(project: Project, runner: Runner) -> None:
    """.cache/pristine for the exports, which need nothing of `setup`: when neither it nor the
    cached checkout exists (a fresh clone), from the verified orig tarball alone (fetched as
    `pristine` fetches it when not cached). What is there is checked by its reader."""
    if project.pristine.is_dir() or project.default_checkout.is_dir():
        return
    try:
        fill_pristine(project, runner, None)
    except PatchsetError as exc:
        raise PatchsetError(f"{exc}\nthe base files come from the verified orig tarball "
                            f"{tarball_path(project)}, as for `./build_scripts/patchset pristine "
                            "DIR`: put it there, or let that command fetch it") from exc


def fill_pristine(project: Project, runner: Runner, checkout: Optional[Path]) -> None:
    if check_pristine(project) is None:
        return
    wanted = read_base_hashes(project)
    missing = {p: d for p, d in wanted.items()
               if checkout is None or not _copy_if_hash(checkout / p, project.pristine / p, d)}
    if missing:
        _extract_from_tarball(project, runner, missing)
    error = check_pristine(project)
    if error:
        raise PatchsetError(error)


def _copy_if_hash(src: Path, dst: Path, digest: str) -> bool:
    if digest == ABSENT:  # a file the series creates
        if dst.is_file():
            dst.unlink()
        return True
    if dst.is_file() and sha256_file(dst) == digest:
        return True
    if not src.is_file() or sha256_file(src) != digest:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return True


def _extract_from_tarball(project: Project, runner: Runner, wanted: Dict[str, str]) -> None:
    """The checkout was already patched, or there is none: take the base files from the
    verified tarball (the files the series creates, which it lacks, are only removed)."""
    tarball = ensure_tarball(project, runner)
    top = base_pin(project)["tree_dir"]
    present = sorted(p for p, d in wanted.items() if d != ABSENT)
    with tempfile.TemporaryDirectory() as tmp:
        runner.run(["tar", "-xJf", tarball, "-C", tmp, "--no-same-owner",
                    *[f"{top}/{p}" for p in present]])
        for path, digest in wanted.items():
            if not _copy_if_hash(Path(tmp) / top / path, project.pristine / path, digest):
                raise PatchsetError(f"{path} in {tarball.name} does not match patches/base.sha256")


def ensure_source(project: Project, runner: Runner) -> Path:
    """Tarball verified, checkout extracted, pristine base files in place; returns the checkout."""
    checkout = ensure_checkout(project, runner)
    ensure_pristine(project, runner)
    return checkout
