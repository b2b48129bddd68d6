"""Folding a checkout's uncommitted edits into the series commits whose lines they change.

`refresh --from DIR --fold` reads each hunk of DIR's work tree against HEAD (`git diff -U0`) and
asks `git blame BASE..HEAD` which commit above the base last wrote the hunk's old lines (for a
pure insertion: the lines on either side of it; upstream's lines among them do not count when a
patch wrote the other). A hunk whose lines more than one commit wrote, or only the base, is
refused, naming the candidates, before anything changes; `--into PATCH` puts every hunk into one
patch instead. Then one `fixup!` commit per target patch is built with plumbing (a temporary
index: the user's is not touched), HEAD is moved onto them and `git rebase -i --autosquash BASE`
squashes each into its patch. The rebased tree must be the edited one, with as many commits as
before; on any failure the checkout is put back: HEAD, index and work tree as they were.
"""
from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import series_io
from .series_io import git_out
from .common import PatchsetError, Project, Runner

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
BLAME_HEADER = re.compile(r"^([0-9a-f]{40,64}) \d+ \d+")
# A file diff with one of these header lines is not a change of lines fold can place.
UNSUPPORTED = {"new file mode": "new", "deleted file mode": "deleted", "old mode": "mode-changed",
               "Binary files": "binary", "rename from": "renamed", "copy from": "copied"}
BASE = "the base (upstream's lines, no patch changed them)"


@dataclasses.dataclass(frozen=True)
class Hunk:
    """One `git diff -U0` hunk: old lines are HEAD's, new lines the work tree's (1-based)."""

    path: str
    old_start: int
    old_count: int
    new_start: int
    new_count: int

    def where(self) -> str:
        if not self.old_count:
            return f"{self.path} new lines after line {self.old_start}"
        end = self.old_start + self.old_count - 1
        return f"{self.path} line{'s' if end > self.old_start else ''} {self.old_start}" + (
            f"-{end}" if end > self.old_start else "")

    def blamed_lines(self, length: int) -> List[int]:
        """HEAD's lines whose author decides the hunk's patch: its own, or an insertion's neighbours."""
        if self.old_count:
            return list(range(self.old_start, self.old_start + self.old_count))
        return [n for n in (self.old_start, self.old_start + 1) if 1 <= n <= length]


@dataclasses.dataclass(frozen=True)
class Patch:
    """A commit of the checkout's series: its place above the base, id and subject."""

    number: int
    sha: str
    subject: str

    def label(self) -> str:
        return f"{self.number:04d} {self.subject}"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a hunk goes: `patch`, or None with the candidates that made it ambiguous."""

    hunk: Hunk
    patch: Optional[Patch]
    candidates: Tuple[str, ...] = ()


# ---- reading the edit and the series -----------------------------------------------------------


def unsupported_kind(header: Sequence[str]) -> Optional[str]:
    for line in header:
        for start, kind in UNSUPPORTED.items():
            if line.startswith(start):
                return kind
    return None


def parse_hunks(diff: str) -> List[Hunk]:
    """The hunks of `git diff -U0 --no-renames` output; a new, deleted, binary or mode-changed
    file is refused (fold places changed lines only)."""
    hunks: List[Hunk] = []
    for chunk in re.split(r"^diff --git ", diff, flags=re.M)[1:]:
        lines = chunk.splitlines()
        header = [line for line in lines if not line.startswith(("@@", "+", "-", " ", "\\"))]
        path = next((line[len("+++ b/"):] for line in lines if line.startswith("+++ b/")),
                    lines[0].split(" b/", 1)[-1])
        kind = unsupported_kind(header)
        if kind:
            raise PatchsetError(f"{path} is {kind}: --fold places changed lines of files HEAD has; "
                                "commit that change yourself (nothing changed)")
        for line in lines:
            match = HUNK_HEADER.match(line)
            if match:
                old, old_n, new, new_n = match.groups()
                hunks.append(Hunk(path, int(old), 1 if old_n is None else int(old_n),
                                  int(new), 1 if new_n is None else int(new_n)))
    return hunks


def work_tree_hunks(repo: Path, runner: Runner) -> List[Hunk]:
    return parse_hunks(git_out(repo, runner, "-c", "core.quotePath=false", "diff", "-U0", "--no-color",
                               "--no-ext-diff", "--no-renames", "HEAD", "--"))


def series_patches(repo: Path, runner: Runner, base: str) -> List[Patch]:
    if git_out(repo, runner, "rev-list", "--merges", f"{base}..HEAD").strip():
        raise PatchsetError(f"{repo} has merge commits above the base; --fold needs a linear series")
    lines = git_out(repo, runner, "log", "--reverse", "--format=%H %s", f"{base}..HEAD").splitlines()
    return [Patch(n, *line.split(" ", 1)) for n, line in enumerate(lines, start=1)]


def blame(repo: Path, runner: Runner, base: str, path: str, lines: Sequence[int]) -> List[str]:
    """The commit that last wrote each of HEAD's `lines` of path (the base for older lines)."""
    ranges = [arg for n in lines for arg in ("-L", f"{n},{n}")]
    out = git_out(repo, runner, "blame", "--porcelain", *ranges, f"{base}..HEAD", "--", path)
    return [m.group(1) for m in map(BLAME_HEADER.match, out.splitlines()) if m]


# ---- deciding ----------------------------------------------------------------------------------


def unique(items: Sequence[Optional[Patch]]) -> List[Optional[Patch]]:
    return list(dict.fromkeys(items))


def place(hunk: Hunk, owners: Sequence[Optional[Patch]]) -> Placement:
    """The one patch that wrote the hunk's lines, else a refusal naming the candidates."""
    found = unique(owners)
    if not hunk.old_count and any(found):
        found = [p for p in found if p is not None]  # an insertion next to a patch's line
    if len(found) == 1 and found[0] is not None:
        return Placement(hunk, found[0])
    return Placement(hunk, None, tuple(BASE if p is None else p.label() for p in found) or (BASE,))


def pick_patch(patches: Sequence[Patch], wanted: str) -> Patch:
    """`--into`: a number (16, 0016, 0016-Subject...) or the start of a subject."""
    number = re.match(r"(\d+)(?:-|$)", wanted)
    if number:
        found = [p for p in patches if p.number == int(number.group(1))]
    else:
        found = [p for p in patches if p.subject.casefold().startswith(wanted.casefold())]
    if len(found) == 1:
        return found[0]
    named = "".join(f"\n  {p.label()}" for p in found)
    raise PatchsetError(f"--into {wanted}: " + (f"{len(found)} patches match:{named}" if found else
                        f"no patch of the {len(patches)} above the base matches (nothing changed)"))


def placements(repo: Path, runner: Runner, base: str, patches: Sequence[Patch], hunks: Sequence[Hunk],
               lengths: Mapping[str, int]) -> List[Placement]:
    by_sha = {p.sha: p for p in patches}
    result = []
    for hunk in hunks:
        lines = hunk.blamed_lines(lengths[hunk.path])
        shas = blame(repo, runner, base, hunk.path, lines) if lines else []
        result.append(place(hunk, [by_sha.get(sha) for sha in shas]))
    return result


def refusal(refused: Sequence[Placement], total: int) -> str:
    rows = "".join(f"\n  {p.hunk.where()}: last changed by {' and '.join(p.candidates)}" for p in refused)
    return (f"cannot fold {len(refused)} of {total} hunks into one patch each (nothing changed; "
            f"`--into PATCH` folds every hunk into PATCH):{rows}")


# ---- changing the checkout ---------------------------------------------------------------------


def split_lines(data: bytes) -> List[bytes]:
    """Lines as git diff counts them: each with its newline, the last possibly without."""
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def apply_hunks(old: Sequence[bytes], new: Sequence[bytes], hunks: Sequence[Hunk]) -> bytes:
    """HEAD's lines with `hunks` (some of the file's) replaced by the work tree's lines."""
    out: List[bytes] = []
    pos = 0
    for hunk in sorted(hunks, key=lambda h: h.old_start):
        cut = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        out += old[pos:cut]
        out += new[hunk.new_start - 1:hunk.new_start - 1 + hunk.new_count] if hunk.new_count else []
        pos = cut + hunk.old_count
    return b"".join([*out, *old[pos:]])


@dataclasses.dataclass
class Files:
    """The edited files: HEAD's lines, the work tree's lines and git mode of each."""

    old: Dict[str, List[bytes]]
    new: Dict[str, List[bytes]]
    mode: Dict[str, str]


def read_files(repo: Path, runner: Runner, paths: Sequence[str], scratch: Path) -> Files:
    head = series_io.rev_files(repo, "HEAD", paths, runner, scratch)
    modes = {}
    for path in paths:
        modes[path] = git_out(repo, runner, "ls-tree", "HEAD", "--", path).split(" ", 1)[0]
    return Files(old={p: split_lines(head[p]) for p in paths},
                 new={p: split_lines((repo / p).read_bytes()) for p in paths}, mode=modes)


def fixup_commit(repo: Path, runner: Runner, env: Mapping[str, str], parent: str, patch: Patch,
                 contents: Mapping[str, bytes], files: Files, scratch: Path) -> str:
    """A `fixup! <subject>` commit on parent with contents (path -> bytes) in its tree."""
    for path, data in contents.items():
        blob_file = scratch / "blob"
        blob_file.write_bytes(data)
        blob = git_out(repo, runner, "hash-object", "-w", "--no-filters", str(blob_file)).strip()
        git_out(repo, runner, "update-index", "--cacheinfo", f"{files.mode[path]},{blob},{path}", env=env)
    tree = git_out(repo, runner, "write-tree", env=env).strip()
    return git_out(repo, runner, "commit-tree", tree, "-p", parent, "-m", f"fixup! {patch.subject}",
                   env=env).strip()


def fixup_chain(repo: Path, runner: Runner, project: Project, plan: Sequence[Placement], files: Files,
                scratch: Path) -> str:
    """The fixup commits on HEAD, in series order, each holding its patch's hunks (and the
    earlier fixups'); returns the last. Built in a temporary index."""
    env = {**series_io.commit_env(project), "GIT_INDEX_FILE": str(scratch / "index")}
    tip = git_out(repo, runner, "rev-parse", "HEAD").strip()
    git_out(repo, runner, "read-tree", tip, env=env)
    done: Dict[str, List[Hunk]] = {}
    targets = sorted({p.patch for p in plan if p.patch}, key=lambda p: p.number)
    for patch in targets:
        mine = [p.hunk for p in plan if p.patch == patch]
        for hunk in mine:
            done.setdefault(hunk.path, []).append(hunk)
        contents = {path: apply_hunks(files.old[path], files.new[path], done[path])
                    for path in {h.path for h in mine}}
        tip = fixup_commit(repo, runner, env, tip, patch, contents, files, scratch)
    return tip


@dataclasses.dataclass(frozen=True)
class Saved:
    """What to put back: HEAD, the index as a tree, and the commit holding the work tree's edits."""

    head: str
    index: str
    edits: str


def restore(repo: Path, runner: Runner, saved: Saved) -> None:
    state = git_out(repo, runner, "rev-parse", "--git-path", "rebase-merge").strip()
    if (repo / state).exists():
        git_out(repo, runner, "rebase", "--abort")
    git_out(repo, runner, "reset", "-q", "--hard", saved.edits)  # the work tree as it was
    git_out(repo, runner, "reset", "-q", "--soft", saved.head)
    git_out(repo, runner, "read-tree", saved.index)


def autosquash(repo: Path, runner: Runner, project: Project, base: str, saved: Saved) -> None:
    """HEAD onto the fixups, then `rebase -i --autosquash`; checked, else everything put back."""
    count = git_out(repo, runner, "rev-list", "--count", f"{base}..{saved.head}").strip()
    env = {**series_io.am_env(project), "GIT_SEQUENCE_EDITOR": ":", "GIT_EDITOR": ":"}
    try:
        git_out(repo, runner, "reset", "-q", saved.edits)
        git_out(repo, runner, "-c", "core.hooksPath=/dev/null", "rebase", "-q", "-i", "--autosquash",
                "--no-autostash", base, env=env)
        same_tree = git_out(repo, runner, "rev-parse", "HEAD^{tree}", f"{saved.edits}^{{tree}}").split()
        if len(set(same_tree)) != 1 or git_out(repo, runner, "rev-list", "--count", f"{base}..HEAD").strip() != count:
            raise PatchsetError("the autosquashed series is not the edited tree (nothing changed)")
    except PatchsetError as exc:
        restore(repo, runner, saved)
        raise PatchsetError(f"`git rebase --autosquash` of the fixups failed; {repo} is as it was "
                            f"(commit the edit and rebase yourself):\n{exc}") from exc


def fold_edits(project: Project, runner: Runner, repo: Path, base: str, into: Optional[str]) -> int:
    """Fold DIR's uncommitted hunks into the series commits; returns how many were folded."""
    hunks = work_tree_hunks(repo, runner)
    if not hunks:
        print("fold: no uncommitted edits")
        return 0
    patches = series_patches(repo, runner, base)
    paths = sorted({h.path for h in hunks})
    with tempfile.TemporaryDirectory(prefix="patchset-fold-") as tmp:
        scratch = Path(tmp)
        files = read_files(repo, runner, paths, scratch)
        if into is not None:
            target = pick_patch(patches, into)
            plan = [Placement(h, target) for h in hunks]
        else:
            lengths = {p: len(files.old[p]) for p in paths}
            plan = placements(repo, runner, base, patches, hunks, lengths)
        refused = [p for p in plan if p.patch is None]
        if refused:
            raise PatchsetError(refusal(refused, len(plan)))
        index = git_out(repo, runner, "write-tree").strip()
        head = git_out(repo, runner, "rev-parse", "HEAD").strip()
        saved = Saved(head, index, fixup_chain(repo, runner, project, plan, files, scratch))
    autosquash(repo, runner, project, base, saved)
    for p in plan:
        print(f"fold: {p.hunk.where()} -> {p.patch.label()}")
    return len(plan)
