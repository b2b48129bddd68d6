"""`patchset refresh --from DIR [--base REV] [--fold] [--into PATCH]`: regenerate patches/ from commits in a git checkout.

The workflow: `git am` the series into a git checkout of v1.13.1, amend or add commits, then
refresh. The base is the newest first-parent ancestor of HEAD at which every file of
patches/base.sha256 has its pinned hash (or `--base REV`, which must satisfy the same). The new
patches come from `series_io.format_series` (the canonical producer), so refreshing unedited
commits rewrites no byte. Before writing, it prints a per-patch summary (matched by subject:
unchanged / modified / added / removed) and `git range-diff` of the old series against the new,
both applied with `git am` in a temp repo made of DIR's base files. Then it updates
patches/series, the patch files, patches/base.sha256 (every base file the new series touches,
existing lines kept in order), torch_overlay/MANIFEST (`<path> <base sha256> <result sha256>`
for each torch/ file the series changes, sorted) and the generated test files
(`generated_tests`: test/test_fake_tensor.py and test/test_weak.py as DIR's HEAD has them).
A dirty tree, an am/rebase in progress or a missing base change nothing.

`--fold` (or `--into PATCH`) first folds DIR's uncommitted edits into the series commits (`fold`:
each hunk into the commit that last changed its lines, by `git blame`), then refreshes as above.

A patch's `Date:` (the quilt export's DEP-3 Last-Update) is its commit's author date, which an
amend or a `rebase --autosquash` keeps; so refresh dates each patch whose diff differs from the
patches/ file of the same subject (`diff_key`: no headers, `index` lines or hunk line numbers)
with the refresh time, and gives a patch whose diff is the same that file's date.
"""
from __future__ import annotations

import argparse
import dataclasses
import email.utils
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import fold, overlay, series_io
from .series_io import git_out
from .generated_tests import EXTENDED_TEST, expected_tests
from .common import (
    ABSENT, PatchsetError, Project, Runner, add_command, bytes_digest, check_base_hashes, raise_if,
    read_base_hashes, read_series, sha256_bytes,
)

BASE_SEARCH_LIMIT = 500  # the base is a few commits below HEAD; don't walk all of history


def check_git_repo(repo: Path, runner: Runner) -> Optional[str]:
    if not repo.is_dir():
        return f"{repo} is not a directory"
    if git_out(repo, runner, "rev-parse", "--is-inside-work-tree", check=False).strip() != "true":
        return f"{repo} is not a git work tree (refresh reads commits: `git am` the series there first)"
    return None


def check_no_operation(repo: Path, runner: Runner) -> Optional[str]:
    for state in ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        path = git_out(repo, runner, "rev-parse", "--git-path", state).strip()
        if (repo / path).exists():
            return f"{repo} has a {state} in progress; finish or abort it first"
    return None


def check_clean(repo: Path, runner: Runner) -> Optional[str]:
    dirty = git_out(repo, runner, "status", "--porcelain", "--untracked-files=no")
    if dirty.strip():
        return (f"{repo} has uncommitted changes (commit or stash them, or pass --fold to fold each "
                "hunk into the patch that last changed its lines; refresh reads commits):\n"
                + dirty.rstrip())
    return None


def check_base_files(files: Mapping[str, bytes], hashes: Mapping[str, str], rev: str) -> Optional[str]:
    return check_base_hashes(hashes, bytes_digest(files), lambda path: f"{path} at {rev}")


def find_base(repo: Path, runner: Runner, hashes: Mapping[str, str], scratch: Path) -> str:
    revs = git_out(repo, runner, "rev-list", "--first-parent", f"--max-count={BASE_SEARCH_LIMIT}",
                   "HEAD").split()
    for rev in revs:
        files = series_io.rev_files(repo, rev, sorted(hashes), runner, scratch)
        if check_base_files(files, hashes, rev) is None:
            return rev
    raise PatchsetError(
        f"no commit among the {len(revs)} newest ancestors of HEAD in {repo} has the pristine base "
        "files of patches/base.sha256; pass --base REV")


def resolve_base(repo: Path, runner: Runner, hashes: Mapping[str, str], scratch: Path,
                 wanted: Optional[str]) -> str:
    if wanted is None:
        return find_base(repo, runner, hashes, scratch)
    rev = git_out(repo, runner, "rev-parse", "--verify", "--quiet", f"{wanted}^{{commit}}",
                  check=False).strip()
    if not rev:
        raise PatchsetError(f"--base {wanted}: no such commit in {repo}")
    error = check_base_files(series_io.rev_files(repo, rev, sorted(hashes), runner, scratch),
                             hashes, wanted)
    if error:
        raise PatchsetError(f"--base {wanted}: {error}")
    return rev


# ---- comparing series --------------------------------------------------------------------------


def subject_key(name: str) -> str:
    return re.sub(r"^\d+-", "", name)


def summarize(old: Sequence[Path], new: Sequence[Path]) -> List[str]:
    """One line per patch: unchanged / modified / added / removed, matched by file subject."""
    old_by_key = {subject_key(p.name): p for p in old}
    new_keys = {subject_key(p.name) for p in new}
    lines = []
    for patch in new:
        before = old_by_key.get(subject_key(patch.name))
        if before is None:
            state = "added"
        elif before.read_bytes() == patch.read_bytes():
            state = "unchanged" if before.name == patch.name else f"unchanged (was {before.name})"
        else:
            state = "modified" if before.name == patch.name else f"modified (was {before.name})"
        lines.append(f"  {state:<10} {patch.name}")
    lines += [f"  {'removed':<10} {p.name}" for p in old if subject_key(p.name) not in new_keys]
    return lines


def diff_key(patch: bytes) -> bytes:
    """The diff of a format-patch file as `git patch-id` compares it: without the mail header,
    message and diffstat, `index` lines and hunk headers (line numbers and the function line
    after them: an earlier patch moves or edits them)."""
    start = patch.find(b"\ndiff --git ")
    lines = patch[start + 1:].splitlines() if start >= 0 else []
    return b"\n".join(re.sub(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@.*", b"@@", line)
                      for line in lines if not line.startswith(b"index "))


DATE_HEADER = re.compile(rb"^Date: (.*)$", flags=re.M)


def git_date(moment: datetime) -> str:
    """RFC 2822 in UTC as `git format-patch` writes it (no leading zero in the day)."""
    return email.utils.format_datetime(moment.astimezone(timezone.utc)).replace(", 0", ", ", 1)


def stamp_dates(old: Sequence[Path], new: Sequence[Path], now: str) -> List[Path]:
    """Rewrite the `Date:` of each new patch that has an old one of the same subject: `now` if
    their diffs differ, else the old patch's date. A new subject keeps its commit's date.
    Returns the patches dated `now`."""
    old_by_key = {subject_key(p.name): p for p in old}
    stamped = []
    for patch in new:
        before = old_by_key.get(subject_key(patch.name))
        if before is None:
            continue
        old_data, data = before.read_bytes(), patch.read_bytes()
        header, sep, rest = data.partition(b"\n\n")
        kept = DATE_HEADER.search(old_data.partition(b"\n\n")[0])
        if kept is not None and diff_key(old_data) == diff_key(data):
            date = kept.group(1)
        else:
            date = now.encode()
            stamped.append(patch)
        patch.write_bytes(DATE_HEADER.sub(lambda _: b"Date: " + date, header, count=1) + sep + rest)
    return stamped


def range_diff(runner: Runner, base_files: Mapping[str, bytes], old: Sequence[Path],
               new: Sequence[Path], workdir: Path, env: Mapping[str, str]) -> str:
    """`git range-diff` of the old and new series, both applied on the same base commit."""
    repo = workdir / "range-diff"
    base = series_io.make_base_repo(base_files, repo, runner)
    branches = []
    for name, patches in (("old", old), ("new", new)):
        git_out(repo, runner, "checkout", "-q", "-B", name, base)
        try:
            series_io.am_series(repo, patches, runner, env)
        except PatchsetError as exc:
            return f"(no range-diff: the {name} series does not apply on DIR's base files: {exc})"
        branches.append(f"{base}..{name}")
    return git_out(repo, runner, "range-diff", "--no-color", *branches)


# ---- facts written next to the patches ---------------------------------------------------------


def base_hashes_text(old_text: str, base_files: Mapping[str, bytes], touched: Sequence[str]) -> str:
    """patches/base.sha256 for `touched`: kept lines stay in place, new ones appended sorted; a
    file the base lacks (the series creates it) is `absent`."""
    wanted = {path: sha256_bytes(base_files[path]) if path in base_files else ABSENT
              for path in touched}
    lines, seen = [], set()
    for line in old_text.splitlines():
        if not line.strip() or line.startswith("#"):
            lines.append(line)
            continue
        path = line.split(None, 1)[1].strip().lstrip("*")
        if path in wanted:
            lines.append(f"{wanted[path]}  {path}")
            seen.add(path)
    lines += [f"{wanted[path]}  {path}" for path in sorted(wanted) if path not in seen]
    return "".join(line + "\n" for line in lines)


def manifest_text(base_files: Mapping[str, bytes], result_files: Mapping[str, bytes]) -> str:
    """torch_overlay/MANIFEST, written as `patchset overlay` writes it (files the series deletes
    cannot be overlaid; overlay_gaps reports them)."""
    base = {path: sha256_bytes(data) for path, data in base_files.items()}
    return overlay.manifest_text(overlay.overlay_files(result_files, base), base)


def overlay_gaps(touched: Sequence[str], base_files: Mapping[str, bytes],
                 result_files: Mapping[str, bytes]) -> List[str]:
    """torch/ files the overlay cannot express (deleted by the series)."""
    return [p for p in touched if p.startswith("torch/")
            and p in base_files and p not in result_files]


# ---- writing -----------------------------------------------------------------------------------


def planned_writes(project: Project, old: Sequence[Path], new: Sequence[Path],
                   facts: Mapping[Path, str]) -> Tuple[Dict[Path, bytes], List[Path]]:
    """(files to write with their bytes, files to delete); only what actually changes."""
    writes: Dict[Path, bytes] = {}
    for patch in new:
        target = project.patches / patch.name
        if not target.is_file() or target.read_bytes() != patch.read_bytes():
            writes[target] = patch.read_bytes()
    new_names = [p.name for p in new]
    if [p.name for p in old] != new_names:
        writes[project.series_file] = series_io.series_text(new).encode()
    for path, text in facts.items():
        if not path.is_file() or path.read_text() != text:
            writes[path] = text.encode()
    deletes = [p for p in old if p.name not in new_names and p.is_file()]
    return writes, deletes


def apply_writes(writes: Mapping[Path, bytes], deletes: Sequence[Path]) -> None:
    for path, data in writes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for path in deletes:
        path.unlink()


@dataclasses.dataclass
class Refreshed:
    """What DIR's commits give: the new series and the files before and after it."""

    base: str
    patches: List[Path]
    touched: List[str]
    base_files: Dict[str, bytes]
    result_files: Dict[str, bytes]


def read_checkout(project: Project, runner: Runner, repo: Path, wanted_base: Optional[str],
                  work: Path) -> Refreshed:
    for check in (check_git_repo, check_no_operation, check_clean):  # in order: the later ones need a repo
        raise_if(check(repo, runner))
    hashes = read_base_hashes(project)
    base = resolve_base(repo, runner, hashes, work, wanted_base)
    if not git_out(repo, runner, "rev-list", f"{base}..HEAD").strip():
        raise PatchsetError(f"no commits between the base {base[:12]} and HEAD in {repo}")
    touched = series_io.changed_paths(repo, base, "HEAD", runner)
    return Refreshed(
        base=base,
        patches=series_io.format_series(repo, base, work / "new", runner),
        touched=touched,
        base_files=series_io.rev_files(repo, base, sorted({*touched, *hashes}), runner, work),
        result_files=series_io.rev_files(repo, "HEAD", touched, runner, work),
    )


def new_facts(project: Project, got: Refreshed) -> Dict[Path, str]:
    old_text = project.base_hashes_file.read_text()
    tests = expected_tests({**got.base_files, **got.result_files})
    pinned = [*got.touched, EXTENDED_TEST]  # generated from its base even when untouched
    return {
        project.base_hashes_file: base_hashes_text(old_text, got.base_files, pinned),
        project.overlay_manifest: manifest_text(got.base_files, got.result_files),
        **{project.root / path: data.decode("utf-8") for path, data in tests.items()},
    }


def report(project: Project, runner: Runner, old: Sequence[Path], got: Refreshed, work: Path) -> List[str]:
    """Print what changed between the series; return warnings to repeat at the end."""
    env = series_io.am_env(project)
    print(f"base: {got.base}\nseries:")
    print("\n".join(summarize(old, got.patches)))
    diff = range_diff(runner, got.base_files, old, got.patches, work, env).rstrip()
    print(diff or "(range-diff: no changes)")
    return [f"{path} is deleted by the series; torch_overlay cannot carry it"
            for path in overlay_gaps(got.touched, got.base_files, got.result_files)]


def fold_first(project: Project, runner: Runner, repo: Path, args: argparse.Namespace,
               work: Path) -> str:
    """`--fold`: DIR's uncommitted hunks into the commits that last changed their lines; the base."""
    for check in (check_git_repo, check_no_operation):
        raise_if(check(repo, runner))
    base = resolve_base(repo, runner, read_base_hashes(project), work, args.base)
    fold.fold_edits(project, runner, repo, base, args.into)
    return base


def cmd_refresh(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    old = read_series(project) if project.series_file.is_file() else []
    with tempfile.TemporaryDirectory(prefix="patchset-refresh-") as tmp:
        work = Path(tmp)
        repo = Path(args.source).resolve()
        base = fold_first(project, runner, repo, args, work) if args.fold or args.into else args.base
        got = read_checkout(project, runner, repo, base, work)
        now = git_date(datetime.now(timezone.utc))
        stamped = stamp_dates(old, got.patches, now)
        warnings = report(project, runner, old, got, work)
        writes, deletes = planned_writes(project, old, got.patches, new_facts(project, got))
        apply_writes(writes, deletes)  # everything above only read; this is the one change
    for patch in stamped:
        print(f"dated {now} (its diff changed; DEP-3's Last-Update): {patch.name}")
    for warning in warnings:
        print(f"warning: {warning}")
    changed = sorted(str(p.relative_to(project.root)) for p in [*writes, *deletes])
    print("refreshed: " + (", ".join(changed) if changed else "nothing changed"))
    if project.overlay_manifest in writes:
        print("torch_overlay/MANIFEST changed: run `patchset overlay` to rewrite the overlay files")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "refresh", cmd_refresh,
        help="regenerate patches/ from the commits of a git checkout",
        description="Regenerate patches/, base.sha256 and the overlay MANIFEST from the commits "
                    "on top of the pristine base in a git checkout.",
    )
    parser.add_argument("--from", dest="source", required=True, metavar="DIR",
                        help="git checkout where the series was applied with `git am` and edited")
    parser.add_argument("--base", metavar="REV",
                        help="base commit (default: newest ancestor of HEAD with the pristine files)")
    parser.add_argument("--fold", action="store_true",
                        help="first fold DIR's uncommitted edits, hunk by hunk, into the patch that last "
                             "changed their lines (git blame; a fixup and `rebase --autosquash` in DIR); "
                             "a hunk of several patches' or upstream's lines is refused, changing nothing")
    parser.add_argument("--into", metavar="PATCH",
                        help="with or without --fold: fold every uncommitted hunk into PATCH (its number, "
                             "e.g. 16, or the start of its subject)")
