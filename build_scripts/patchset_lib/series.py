"""Applying the series: to files in a scratch dir, or to a checkout (or taking it back out).

All or nothing: before anything is written, the checkout's base files are compared with `patches/base.sha256`
and the whole series is applied to a temporary copy of them, so a wrong base or a patch that
does not apply is reported (naming patch, file and hunk) with the checkout untouched.
A git checkout with a clean tree gets one commit per patch (`git am`); anything else gets
`git apply`, with the touched files snapshotted and restored byte for byte on failure.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .common import (
    ABSENT,
    PatchsetError,
    Project,
    Runner,
    quiet,
    read_base_hashes,
    read_series,
    file_digest,
    sha256_bytes,
)
from .series_io import am_env, head, isolated_env, read_files
from .source import ensure_pristine

Snapshot = Dict[str, Optional[bytes]]


# --- series facts -------------------------------------------------------------------------

def load_series(project: Project) -> List[Path]:
    if not project.series_file.is_file():
        raise PatchsetError(f"{project.series_file} does not exist: there is no series to apply")
    series = read_series(project)
    missing = [p.name for p in series if not p.is_file()]
    if missing:
        raise PatchsetError(f"patches listed in {project.series_file.name} are missing: {', '.join(missing)}")
    if not series:
        raise PatchsetError(f"{project.series_file} lists no patches")
    return series


def touched_paths(runner: Runner, series: Sequence[Path]) -> List[str]:
    """In-tree paths the series modifies, from `git apply --numstat` of each patch."""
    paths: Dict[str, None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for patch in series:
            proc = quiet(runner).run(["git", "apply", "--numstat", patch], cwd=Path(tmp),
                                     env=isolated_env(Path(tmp)), capture=True)
            for line in proc.stdout.splitlines():
                parts = line.split("\t")
                if len(parts) == 3:
                    paths[parts[2]] = None
    return list(paths)


def check_touched_pinned(touched: Sequence[str], base: Mapping[str, str]) -> Optional[str]:
    unpinned = [p for p in touched if p not in base]
    if unpinned:
        return f"the series touches files not pinned in patches/base.sha256: {', '.join(unpinned)}"
    return None


# --- explaining a failed apply ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Hunk:
    number: int
    old_start: int
    header: str


def patch_hunks(patch: Path, path: str) -> List[Hunk]:
    """The hunks of `patch` for in-tree `path`, numbered from 1 as in the patch file."""
    hunks: List[Hunk] = []
    current: Optional[str] = None
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("diff --git "):
            current = line.rsplit(" b/", 1)[-1]
        elif current == path and line.startswith("@@ -"):
            match = re.match(r"@@ -(\d+)", line)
            if match:
                hunks.append(Hunk(len(hunks) + 1, int(match.group(1)), line))
    return hunks


def describe_apply_failure(patch: Path, stderr: str) -> str:
    """Name the patch, the file and the hunk from git apply's `error: patch failed: FILE:LINE`."""
    match = re.search(r"error: patch failed: (.+):(\d+)\s*$", stderr, re.MULTILINE)
    if not match:
        return f"patch {patch.name} does not apply: {stderr.strip()}"
    path, line = match.group(1), int(match.group(2))
    hunk = next((h for h in patch_hunks(patch, path) if h.old_start == line), None)
    where = f"hunk #{hunk.number} ({hunk.header})" if hunk else f"the hunk at line {line}"
    return f"patch {patch.name} does not apply: {path}: {where} does not match at line {line}"


def git_apply(runner: Runner, patch: Path, workdir: Path, reverse: bool = False) -> None:
    argv = ["git", "apply", *(["-R"] if reverse else []), patch.resolve()]
    proc = runner.run(argv, cwd=workdir, env=isolated_env(workdir), check=False, capture=True)
    if proc.returncode != 0:
        raise PatchsetError(describe_apply_failure(patch, proc.stderr or ""))


# --- computing results in a temporary directory -------------------------------------------

def apply_in_temp(
    runner: Runner, series: Sequence[Path], files: Mapping[str, bytes], reverse: bool = False,
    paths: Optional[Sequence[str]] = None,
) -> Dict[str, bytes]:
    """Apply (or reverse) the series to `files` in a scratch dir; the resulting bytes by path,
    of `paths` (default: those of `files`) that exist after it."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "tree"
        for path, data in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_bytes(data)
        for patch in (reversed(series) if reverse else series):
            git_apply(quiet(runner), patch, work, reverse=reverse)
        return {path: (work / path).read_bytes() for path in (paths or files)
                if (work / path).is_file()}


def patched_result(project: Project, runner: Runner) -> Dict[str, bytes]:
    """Every base file after the whole series, computed from .cache/pristine (overlay uses this too)."""
    ensure_pristine(project, runner)
    series = load_series(project)
    base = read_base_hashes(project)
    error = check_touched_pinned(touched_paths(runner, series), base)
    if error:
        raise PatchsetError(error)
    return apply_in_temp(runner, series, read_files(project.pristine, sorted(base)), paths=sorted(base))


# --- the state of a checkout --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CheckoutState:
    kind: str  # "pristine" | "patched" | "modified"
    detail: str = ""


def checkout_state(checkout: Path, base: Mapping[str, str], patched: Mapping[str, str]) -> CheckoutState:
    """Compare every base file of `checkout` with the base hash and the fully-patched hash."""
    at_base: List[str] = []
    at_patched: List[str] = []
    for path in sorted(base):
        digest = file_digest(checkout / path)
        wanted = patched.get(path, ABSENT)
        if digest == ABSENT and ABSENT not in (base[path], wanted):
            return CheckoutState("modified", f"{path} is missing from {checkout}")
        if digest == base[path]:
            at_base.append(path)
        if digest == wanted:
            at_patched.append(path)
        if digest not in (base[path], wanted):
            return CheckoutState(
                "modified",
                f"{path} matches neither the base (patches/base.sha256) nor the patched result "
                f"(sha256 {digest})",
            )
    if len(at_base) == len(base):
        return CheckoutState("pristine")
    if len(at_patched) == len(base):
        return CheckoutState("patched")
    pristine_only = [p for p in at_base if p not in at_patched]
    patched_only = [p for p in at_patched if p not in at_base]
    return CheckoutState(
        "modified",
        f"the series is partly applied: {', '.join(patched_only)} patched but {', '.join(pristine_only)} pristine",
    )


def hashes(files: Mapping[str, bytes]) -> Dict[str, str]:
    return {path: sha256_bytes(data) for path, data in files.items()}


# --- git checkouts ------------------------------------------------------------------------

def is_git_checkout(runner: Runner, checkout: Path) -> bool:
    """True when `checkout` itself is the top of a git work tree (not merely inside one)."""
    proc = quiet(runner).git("rev-parse", "--show-toplevel", cwd=checkout,
                             env=isolated_env(checkout), check=False, capture=True)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == checkout.resolve()


def check_git_clean(runner: Runner, checkout: Path) -> Optional[str]:
    proc = quiet(runner).git("status", "--porcelain", "--untracked-files=no", cwd=checkout, capture=True)
    if proc.stdout.strip():
        return f"{checkout} has uncommitted changes"
    if (checkout / ".git" / "rebase-apply").exists():
        return f"{checkout} has a git am or rebase in progress"
    return None


def patch_id(runner: Runner, text: str, cwd: Path) -> str:
    proc = quiet(runner).git("patch-id", "--stable", cwd=cwd, input=text, capture=True)
    return proc.stdout.split()[0] if proc.stdout.strip() else ""


def series_commits_on_top(runner: Runner, checkout: Path, series: Sequence[Path]) -> bool:
    """True when the last len(series) commits are exactly the series, in order (by patch-id)."""
    count = len(series)
    proc = quiet(runner).git("rev-list", f"--max-count={count + 1}", "HEAD", cwd=checkout,
                             check=False, capture=True)
    if proc.returncode != 0 or len(proc.stdout.split()) < count + 1:
        return False  # the series commits need a parent to go back to
    for offset, patch in enumerate(reversed(list(series))):
        shown = quiet(runner).git("show", "--format=", f"HEAD~{offset}", cwd=checkout, capture=True).stdout
        if patch_id(runner, shown, checkout) != patch_id(runner, patch.read_text(errors="replace"), checkout):
            return False
    return True


def check_commit_has_base(runner: Runner, checkout: Path, rev: str, pristine: Path,
                          paths: Sequence[str]) -> Optional[str]:
    """None when `rev` holds every base file byte-identical to .cache/pristine (by git blob id)."""
    for path in sorted(paths):
        committed = quiet(runner).git("rev-parse", "--verify", "--quiet", f"{rev}:{path}", cwd=checkout,
                                      check=False, capture=True).stdout.strip()
        if not (pristine / path).is_file():  # a file the series creates
            wanted = ""
        else:
            wanted = quiet(runner).git("hash-object", "--no-filters", pristine / path, cwd=checkout,
                                       capture=True).stdout.strip()
        if committed != wanted:
            return f"{path} in {rev} is not the pristine base"
    return None


# --- snapshots ----------------------------------------------------------------------------

def snapshot(checkout: Path, paths: Sequence[str]) -> Snapshot:
    return {p: (checkout / p).read_bytes() if (checkout / p).is_file() else None for p in paths}


def restore(checkout: Path, saved: Snapshot) -> None:
    for path, data in saved.items():
        target = checkout / path
        if data is None:
            if target.exists():
                target.unlink()
            continue
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def check_result(checkout: Path, expected: Mapping[str, str]) -> Optional[str]:
    for path, digest in sorted(expected.items()):
        if file_digest(checkout / path) != digest:
            return f"{path} does not have the expected content after the operation"
    return None


def reset_cached_checkout(project: Project, runner: Runner, checkout: Path) -> Optional[str]:
    """Put the pristine base files back into one of the tool's OWN cached checkouts when it holds
    neither the base nor the current series (e.g. an older version of the series); returns what
    was done. Only for .cache/: a user's checkout is never reset."""
    if not checkout.is_dir():
        return None
    state = checkout_state(checkout, read_base_hashes(project), hashes(patched_result(project, runner)))
    if state.kind != "modified":
        return None
    restore(checkout, pristine_snapshot(project))
    return f"reset base files of {checkout} from .cache/pristine ({state.detail})"


def pristine_snapshot(project: Project) -> Snapshot:
    """Every path of patches/base.sha256 as v1.13.1 has it: the bytes of .cache/pristine, or None
    for a file the series creates."""
    base = read_base_hashes(project)
    files = read_files(project.pristine, sorted(base))
    return {path: None if digest == ABSENT else files[path] for path, digest in base.items()}


def copy_pristine_tree(project: Project, source: Path, dest: Path, subdirs: Sequence[str]) -> Path:
    """dest as a pristine v1.13.1 tree: `subdirs` copied from the 1.13.1 tree at source (which
    may have the series applied, as `run` leaves the cached checkout), then every path of
    patches/base.sha256 put back as pinned (files the series creates removed) and verified."""
    for subdir in subdirs:
        shutil.copytree(source / subdir, dest / subdir, symlinks=True)
    restore(dest, pristine_snapshot(project))
    error = check_result(dest, read_base_hashes(project))
    if error:
        raise PatchsetError(f"{dest} is not a pristine v1.13.1 tree: {error}")
    return dest


# --- apply / reverse ----------------------------------------------------------------------

def apply_with_git_apply(runner: Runner, checkout: Path, series: Sequence[Path], paths: Sequence[str],
                         expected: Mapping[str, str], reverse: bool) -> None:
    saved = snapshot(checkout, paths)
    try:
        for patch in (reversed(series) if reverse else series):
            git_apply(runner, patch, checkout, reverse=reverse)
        error = check_result(checkout, expected)
        if error:
            raise PatchsetError(error)
    except BaseException:
        restore(checkout, saved)
        raise


def apply_with_git_am(project: Project, runner: Runner, checkout: Path, series: Sequence[Path],
                      paths: Sequence[str], expected: Mapping[str, str]) -> None:
    original = head(checkout, quiet(runner))
    saved = snapshot(checkout, paths)
    try:
        proc = runner.git("am", "--no-3way", *[p.resolve() for p in series], cwd=checkout,
                          env=am_env(project), check=False, capture=True)
        if proc.returncode != 0:
            raise PatchsetError(f"git am failed: {(proc.stdout or '') + (proc.stderr or '')}".strip())
        error = check_result(checkout, expected)
        if error:
            raise PatchsetError(error)
    except BaseException:
        if (checkout / ".git" / "rebase-apply").exists():
            runner.git("am", "--abort", cwd=checkout, check=False, capture=True)
        if head(checkout, quiet(runner)) != original:
            runner.git("reset", "--hard", original, cwd=checkout, check=False, capture=True)
        restore(checkout, saved)
        raise


def apply_series(project: Project, runner: Runner, checkout: Path, reverse: bool = False) -> str:
    """Apply (or reverse) the series on `checkout`, all or nothing; returns what was done."""
    if not checkout.is_dir():
        raise PatchsetError(f"checkout {checkout} does not exist")
    series = load_series(project)
    base = read_base_hashes(project)
    result = patched_result(project, runner)  # also proves the series applies to the base
    patched = hashes(result)
    state = checkout_state(checkout, base, patched)
    if state.kind == "modified":
        raise PatchsetError(f"{state.detail}; nothing changed")
    if not reverse and state.kind == "patched":
        return "series already applied, nothing changed"
    if reverse and state.kind == "pristine":
        return "series not applied, nothing changed"
    paths = sorted(base)
    names = ", ".join(p.name for p in series)
    if is_git_checkout(runner, checkout) and check_git_clean(runner, checkout) is None:
        if not reverse:
            apply_with_git_am(project, runner, checkout, series, paths, patched)
            return f"applied {len(series)} patches to {checkout} as git commits (git am): {names}"
        below = f"HEAD~{len(series)}"
        if series_commits_on_top(runner, checkout, series) and \
                check_commit_has_base(runner, checkout, below, project.pristine, paths) is None:
            runner.git("reset", "--keep", below, cwd=checkout)
            error = check_result(checkout, base)
            if error:
                raise PatchsetError(error)
            return f"removed the {len(series)} series commits from {checkout} (git reset --keep {below})"
    # Reverse-apply from the checkout's own bytes in a scratch dir first: proves it will work.
    if reverse:
        apply_in_temp(runner, series, read_files(checkout, paths), reverse=True)
    apply_with_git_apply(runner, checkout, series, paths, base if reverse else patched, reverse)
    verb = "reversed" if reverse else "applied"
    return f"{verb} {len(series)} patches {'on' if reverse else 'to'} {checkout} (git apply): {names}"
