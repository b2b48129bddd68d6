"""`patchset refresh --from DIR`: patches/ regenerated from commits in a git checkout.

A synthetic series is applied with `git am` into a temp git repo (history below the base, the
pristine base commit, the series), edited, and refreshed into a temp project copy.
"""
import argparse
import email.utils
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import pytest
from conftest import SMALL_BASE, SeriesEdit, commit, commit_series, make_small_project, sha, tree_hashes

from patchset_lib import refresh_cmd, series_io
from patchset_lib.common import PatchsetError, Project, Runner, read_series

PRISTINE = SMALL_BASE
OTHER = {"torch/_subclasses/schema_check_mode.py": b"def check():\n    return 3\n",
         "setup.py": b"# not touched\n"}
EDITS: Sequence[SeriesEdit] = (
    SeriesEdit("Weak memo for converters\n\nWhy and what.\n",
               {"torch/_subclasses/meta_utils.py": b"def meta():\n    return 10\n"}),
    SeriesEdit("Fallback aliasing\n\nOutputs alias inputs.\n",
               {"torch/_subclasses/fake_tensor.py": b"def fake():\n    return 20\n"}),
)
EDITOR = {"GIT_AUTHOR_NAME": "Editor", "GIT_AUTHOR_EMAIL": "editor@example.invalid",
          "GIT_COMMITTER_NAME": "Editor", "GIT_COMMITTER_EMAIL": "editor@example.invalid",
          "GIT_AUTHOR_DATE": "2026-12-03T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-12-03T00:00:00+00:00"}


def manifest(base: Mapping[str, bytes], result: Mapping[str, bytes]) -> str:
    return "".join(f"{p} {sha(base[p])} {sha(result[p])}\n" for p in sorted(result)
                   if p.startswith("torch/") and base[p] != result[p])


def write_series(project: Project, runner: Runner, work: Path) -> None:
    """The canonical series of EDITS, base.sha256, MANIFEST and the generated test file, as the
    lead would commit them."""
    commit_series(project, runner, EDITS, work)
    result = {**PRISTINE, **{p: d for edit in EDITS for p, d in edit.files.items()}}
    project.overlay.mkdir()
    project.overlay_manifest.write_text(manifest(PRISTINE, result))
    (project.root / "test").mkdir(exist_ok=True)
    (project.root / "test/test_fake_tensor.py").write_bytes(result["test/test_fake_tensor.py"])


def checkout_with_series(project: Project, runner: Runner, path: Path,
                         pristine: Mapping[str, bytes] = PRISTINE) -> Path:
    """A git checkout: an older revision, then the pristine base, then `git am` of the series."""
    repo = path
    series_io.init_repo(repo, runner)
    older = {p: d.replace(b"return", b"return -") for p, d in pristine.items()}
    commit(repo, runner, "older upstream", {**older, **OTHER}, EDITOR)
    commit(repo, runner, "v1.13.1", pristine, EDITOR)
    series_io.am_series(repo, read_series(project), runner, EDITOR)
    return repo


def refresh(project: Project, runner: Runner, source: Path, base: Optional[str] = None,
            fold: bool = False, into: Optional[str] = None) -> int:
    args = argparse.Namespace(source=str(source), base=base, fold=fold, into=into)
    return refresh_cmd.cmd_refresh(project, runner, args)


@pytest.fixture
def project(tmp_path: Path, runner: Runner) -> Project:
    project = make_small_project(tmp_path / "proj")
    write_series(project, runner, tmp_path)
    return project


@pytest.fixture
def checkout(project: Project, runner: Runner, tmp_path: Path) -> Path:
    return checkout_with_series(project, runner, tmp_path / "checkout")


def head_files(repo: Path) -> Dict[str, bytes]:
    return series_io.read_files(repo, PRISTINE)


def test_refresh_without_edits_changes_no_byte(project: Project, runner: Runner, checkout: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    before = tree_hashes(project.root)
    assert refresh(project, runner, checkout) == 0
    assert tree_hashes(project.root) == before
    out = capsys.readouterr().out
    assert out.count("  unchanged  ") == 2
    assert "refreshed: nothing changed" in out
    assert out.count(" = ") == 2  # range-diff: both commits equal


def test_base_is_the_newest_pristine_ancestor(project: Project, runner: Runner, checkout: Path,
                                              tmp_path: Path) -> None:
    hashes = {p: sha(d) for p, d in PRISTINE.items()}
    base = refresh_cmd.find_base(checkout, runner, hashes, tmp_path)
    subject = runner.git("log", "-1", "--format=%s", base, cwd=checkout, capture=True).stdout.strip()
    assert subject == "v1.13.1"
    assert base == series_io.head(checkout, runner, "HEAD~2")


def test_amended_and_added_commits(project: Project, runner: Runner, checkout: Path,
                                   capsys: pytest.CaptureFixture) -> None:
    old_second = (project.patches / "0002-Fallback-aliasing.patch").read_bytes()
    old_first = (project.patches / "0001-Weak-memo-for-converters.patch").read_bytes()
    new_fake = b"def fake():\n    return 21\n"
    series_io.write_files(checkout, {"torch/_subclasses/fake_tensor.py": new_fake})
    runner.git("commit", "-q", "-a", "--amend", "--no-edit", cwd=checkout, env=EDITOR, capture=True)
    new_other = b"def check():\n    return 30\n"
    commit(checkout, runner, "Schema check follows\n\nBody.\n",
           {"torch/_subclasses/schema_check_mode.py": new_other}, EDITOR)
    assert refresh(project, runner, checkout) == 0
    names = [p.name for p in read_series(project)]
    assert names == ["0001-Weak-memo-for-converters.patch", "0002-Fallback-aliasing.patch",
                     "0003-Schema-check-follows.patch"]
    assert (project.patches / names[0]).read_bytes() == old_first
    assert (project.patches / names[1]).read_bytes() != old_second
    assert "+    return 21" in (project.patches / names[1]).read_text()
    assert "From: Editor <editor@example.invalid>" in (project.patches / names[2]).read_text()
    out = capsys.readouterr().out
    assert "  unchanged  0001-" in out and "  modified   0002-" in out and "  added      0003-" in out
    assert "-:  ------- > 3:" in out  # range-diff: a new commit
    # base.sha256: old lines kept in order, the newly touched base file appended.
    lines = project.base_hashes_file.read_text().splitlines()
    assert lines == [f"{sha(d)}  {p}" for p, d in PRISTINE.items()] + [
        f"{sha(OTHER['torch/_subclasses/schema_check_mode.py'])}  torch/_subclasses/schema_check_mode.py"]
    result = {**head_files(checkout), "torch/_subclasses/schema_check_mode.py": new_other}
    base = {**PRISTINE, **{"torch/_subclasses/schema_check_mode.py": OTHER["torch/_subclasses/schema_check_mode.py"]}}
    assert project.overlay_manifest.read_text() == manifest(base, result)
    assert project.overlay_manifest.read_text().count("\n") == 3


def date_of(patch: Path) -> datetime:
    header = patch.read_text().split("\n\n", 1)[0]
    return email.utils.parsedate_to_datetime(re.search(r"^Date: (.*)$", header, flags=re.M).group(1))


def test_a_patch_whose_diff_changed_is_dated_now(project: Project, runner: Runner, checkout: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    """Its author date (hence DEP-3's Last-Update) would stay: an amend or autosquash keeps it."""
    first, second = (project.patches / "0001-Weak-memo-for-converters.patch",
                     project.patches / "0002-Fallback-aliasing.patch")
    old_first, old_date = first.read_bytes(), date_of(second)
    series_io.write_files(checkout, {"torch/_subclasses/fake_tensor.py": b"def fake():\n    return 21\n"})
    runner.git("commit", "-q", "-a", "--amend", "--no-edit", cwd=checkout, env=EDITOR, capture=True)
    author_date = runner.git("log", "-1", "--format=%aI", cwd=checkout, capture=True).stdout.strip()
    assert datetime.fromisoformat(author_date) == old_date  # the amend kept it
    before = datetime.now(timezone.utc).replace(microsecond=0)
    assert refresh(project, runner, checkout) == 0
    assert before <= date_of(second) <= datetime.now(timezone.utc)
    assert first.read_bytes() == old_first  # its diff is the same: its date too
    assert f"(its diff changed; DEP-3's Last-Update): {second.name}" in capsys.readouterr().out
    after = tree_hashes(project.root)
    assert refresh(project, runner, checkout) == 0  # the commit's old date does not come back
    assert tree_hashes(project.root) == after


def test_diff_key_ignores_headers_index_lines_and_hunk_positions() -> None:
    patch = (b"From 0 Mon Sep 17 00:00:00 2001\nDate: Sat, 5 Dec 2026 00:01:00 +0000\n\nBody.\n---\n"
             b" a.py | 1 +\n\ndiff --git a/a.py b/a.py\nindex 1111..2222 100644\n--- a/a.py\n+++ b/a.py\n"
             b"@@ -10,6 +10,7 @@ def f():\n x\n+y\n")
    moved = (patch.replace(b"Sat, 5 Dec", b"Sun, 6 Dec").replace(b"Body.", b"Other body.")
             .replace(b"1111..2222", b"3333..4444").replace(b"-10,6 +10,7", b"-12,6 +12,7"))
    assert refresh_cmd.diff_key(moved) == refresh_cmd.diff_key(patch)
    assert refresh_cmd.diff_key(patch.replace(b"+y", b"+z")) != refresh_cmd.diff_key(patch)
    renamed = patch.replace(b"@@ def f():", b"@@ def g():")  # an earlier patch edited that line
    assert refresh_cmd.diff_key(renamed) == refresh_cmd.diff_key(patch)


def test_tests_added_in_a_patch_regenerate_the_repo_test_file(project: Project, runner: Runner,
                                                              checkout: Path) -> None:
    tests = PRISTINE["test/test_fake_tensor.py"] + b"\n\nclass FallbackAliasingTest:\n    pass\n"
    series_io.write_files(checkout, {"test/test_fake_tensor.py": tests})
    runner.git("commit", "-q", "-a", "--amend", "--no-edit", cwd=checkout, env=EDITOR, capture=True)
    assert refresh(project, runner, checkout) == 0
    assert (project.root / "test/test_fake_tensor.py").read_bytes() == tests
    assert "+class FallbackAliasingTest:" in (project.patches / "0002-Fallback-aliasing.patch").read_text()


def test_dropped_commit_removes_its_patch(project: Project, runner: Runner, checkout: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    runner.git("reset", "-q", "--hard", "HEAD~1", cwd=checkout, capture=True)
    refresh(project, runner, checkout)
    assert [p.name for p in read_series(project)] == ["0001-Weak-memo-for-converters.patch"]
    assert not (project.patches / "0002-Fallback-aliasing.patch").exists()
    assert "  removed    0002-Fallback-aliasing.patch" in capsys.readouterr().out
    assert project.overlay_manifest.read_text().count("\n") == 1


def test_dirty_tree_is_refused_and_nothing_changes(project: Project, runner: Runner,
                                                   checkout: Path) -> None:
    (checkout / "torch/_subclasses/meta_utils.py").write_text("edited, not committed\n")
    before = tree_hashes(project.root)
    with pytest.raises(PatchsetError, match="uncommitted changes"):
        refresh(project, runner, checkout)
    assert tree_hashes(project.root) == before


def test_explicit_base(project: Project, runner: Runner, checkout: Path) -> None:
    before = tree_hashes(project.root)
    assert refresh(project, runner, checkout, base="HEAD~2") == 0
    assert tree_hashes(project.root) == before
    with pytest.raises(PatchsetError, match="differs from the 1.13.1 base"):
        refresh(project, runner, checkout, base="HEAD~3")
    with pytest.raises(PatchsetError, match="no such commit"):
        refresh(project, runner, checkout, base="no-such-rev")
    assert tree_hashes(project.root) == before


def test_no_pristine_ancestor_and_not_a_repo(project: Project, runner: Runner, tmp_path: Path) -> None:
    repo = tmp_path / "unrelated"
    series_io.init_repo(repo, runner)
    commit(repo, runner, "something else", {"README": b"hi\n"}, EDITOR)
    with pytest.raises(PatchsetError, match="pass --base REV"):
        refresh(project, runner, repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(PatchsetError, match="not a git work tree"):
        refresh(project, runner, plain)


# ---- --fold: uncommitted hunks into the patch that last changed their lines ---------------------

FAKE = "torch/_subclasses/fake_tensor.py"
LINES = [f"line {n}\n".encode() for n in range(1, 13)]
FOLD_BASE = {**PRISTINE, FAKE: b"".join(LINES)}


def with_lines(changes: Mapping[int, bytes], lines: Sequence[bytes] = LINES) -> bytes:
    """lines with line n (1-based) replaced by changes[n]."""
    return b"".join(changes.get(n, line) for n, line in enumerate(lines, start=1))


# Three patches changing one file at lines 2, 6 and 10: the third touches it last.
FOLD_SERIES = (
    SeriesEdit("First\n\nLine 2.\n", {FAKE: with_lines({2: b"first\n"})}),
    SeriesEdit("Second\n\nLine 6.\n", {FAKE: with_lines({2: b"first\n", 6: b"second\n"})}),
    SeriesEdit("Third\n\nLine 10.\n", {FAKE: with_lines({2: b"first\n", 6: b"second\n", 10: b"third\n"})}),
)
FOLD_PATCHES = ("0001-First.patch", "0002-Second.patch", "0003-Third.patch")


@pytest.fixture
def fold_project(tmp_path: Path, runner: Runner) -> Project:
    project = make_small_project(tmp_path / "fold-proj", FOLD_BASE)
    commit_series(project, runner, FOLD_SERIES, tmp_path)
    return project


@pytest.fixture
def fold_checkout(fold_project: Project, runner: Runner, tmp_path: Path) -> Path:
    return checkout_with_series(fold_project, runner, tmp_path / "fold-checkout", FOLD_BASE)


def edit_fake(checkout: Path, changes: Mapping[int, bytes]) -> None:
    lines = (checkout / FAKE).read_bytes().splitlines(keepends=True)
    (checkout / FAKE).write_bytes(with_lines(changes, lines))


def diff_key(text: str) -> bytes:
    return refresh_cmd.diff_key(text.encode())


def patch_texts(project: Project) -> Dict[str, str]:
    return {name: (project.patches / name).read_text() for name in FOLD_PATCHES}


def checkout_state(repo: Path, runner: Runner) -> Sequence[str]:
    """HEAD, the index's tree and the status: what a refused fold must leave as it was."""
    def git(*args: str) -> str:
        return runner.git(*args, cwd=repo, capture=True).stdout
    return (git("rev-parse", "HEAD"), git("write-tree"), git("status", "--porcelain"), git("diff"))


def test_fold_puts_an_edit_into_the_patch_that_wrote_its_lines(
        fold_project: Project, runner: Runner, fold_checkout: Path, capsys: pytest.CaptureFixture) -> None:
    """Not into the last patch touching the file (`git log -1 -- FILE`): 0003."""
    old = patch_texts(fold_project)
    edit_fake(fold_checkout, {2: b"first, edited\n"})
    assert refresh(fold_project, runner, fold_checkout, fold=True) == 0
    new = patch_texts(fold_project)
    assert "+first, edited" in new["0001-First.patch"] and new["0001-First.patch"] != old["0001-First.patch"]
    # the later patches: other index lines and hunk headers only, so not dated anew
    assert [diff_key(new[n]) == diff_key(old[n]) for n in FOLD_PATCHES[1:]] == [True, True]
    out = capsys.readouterr().out
    assert f"fold: {FAKE} line 2 -> 0001 First" in out
    assert "Last-Update): 0001-First.patch\n" in out and "Last-Update): 0002" not in out
    assert runner.git("status", "--porcelain", "--untracked-files=no", cwd=fold_checkout,
                      capture=True).stdout == ""
    count = runner.git("rev-list", "--count", "HEAD~3..HEAD", cwd=fold_checkout, capture=True).stdout
    assert int(count) == 3 and (fold_checkout / FAKE).read_bytes() == with_lines(
        {2: b"first, edited\n", 6: b"second\n", 10: b"third\n"})


def test_fold_places_each_hunk_and_insertions_by_their_neighbours(
        fold_project: Project, runner: Runner, fold_checkout: Path, capsys: pytest.CaptureFixture) -> None:
    edit_fake(fold_checkout, {6: b"second\nafter second\n", 10: b"third, edited\n"})
    assert refresh(fold_project, runner, fold_checkout, fold=True) == 0
    out = capsys.readouterr().out
    assert f"fold: {FAKE} new lines after line 6 -> 0002 Second" in out
    assert f"fold: {FAKE} line 10 -> 0003 Third" in out
    new = patch_texts(fold_project)
    assert "+after second" in new["0002-Second.patch"] and "+third, edited" in new["0003-Third.patch"]


def refused_changing_nothing(project: Project, runner: Runner, checkout: Path, match: str,
                             **options: object) -> PatchsetError:
    """refresh with `options` raises `match`, leaving the project and the checkout (HEAD, index,
    work tree) as they were; returns the error."""
    before, state = tree_hashes(project.root), checkout_state(checkout, runner)
    with pytest.raises(PatchsetError, match=match) as refused:
        refresh(project, runner, checkout, **options)
    assert tree_hashes(project.root) == before and checkout_state(checkout, runner) == state
    return refused.value


@pytest.mark.parametrize("changes, named", [
    ({2: b"x\n", 3: b"x\n", 4: b"x\n", 5: b"x\n", 6: b"x\n"}, ("0001 First", "0002 Second", "the base")),
    ({4: b"upstream's line, edited\n"}, ("the base",)),
    ({11: b"line 11\nbetween upstream's lines\n"}, ("the base",)),
], ids=["two-patches", "base", "insertion-in-base"])
def test_fold_refuses_a_hunk_of_several_patches_or_the_base_changing_nothing(
        fold_project: Project, runner: Runner, fold_checkout: Path, changes: Mapping[int, bytes],
        named: Sequence[str]) -> None:
    edit_fake(fold_checkout, changes)
    error = str(refused_changing_nothing(fold_project, runner, fold_checkout, "cannot fold 1 of 1 hunks",
                                         fold=True))
    assert all(name in error for name in named), error
    assert "--into PATCH" in error


@pytest.mark.parametrize("into", ["2", "0002", "0002-Second.patch", "sec"])
def test_into_overrides_the_blame(fold_project: Project, runner: Runner, fold_checkout: Path,
                                  into: str, capsys: pytest.CaptureFixture) -> None:
    edit_fake(fold_checkout, {8: b"line 8, edited\n"})  # upstream's line: refused without --into
    assert refresh(fold_project, runner, fold_checkout, into=into) == 0
    assert f"fold: {FAKE} line 8 -> 0002 Second" in capsys.readouterr().out
    new = patch_texts(fold_project)
    assert "+line 8, edited" in new["0002-Second.patch"] and "+line 8, edited" not in new["0003-Third.patch"]


def test_into_a_patch_that_does_not_exist_changes_nothing(fold_project: Project, runner: Runner,
                                                          fold_checkout: Path) -> None:
    edit_fake(fold_checkout, {2: b"first, edited\n"})
    refused_changing_nothing(fold_project, runner, fold_checkout, "--into 7: no patch", into="7")


def test_a_fold_whose_rebase_conflicts_puts_the_checkout_back(
        fold_project: Project, runner: Runner, fold_checkout: Path) -> None:
    """Line 5 squashed into 0001, whose tree has no 0002 on the next line: git refuses the merge."""
    edit_fake(fold_checkout, {5: b"line 5, edited\n"})
    runner.git("add", FAKE, cwd=fold_checkout, capture=True)  # staged: the index comes back too
    edit_fake(fold_checkout, {9: b"line 9, edited\n"})
    refused_changing_nothing(fold_project, runner, fold_checkout, "is as it was", into="1")


def test_fold_refuses_a_deleted_file_and_reads_commits_when_clean(
        fold_project: Project, runner: Runner, fold_checkout: Path, capsys: pytest.CaptureFixture) -> None:
    old = patch_texts(fold_project)
    assert refresh(fold_project, runner, fold_checkout, fold=True) == 0  # nothing to fold: a refresh
    assert "fold: no uncommitted edits" in capsys.readouterr().out
    assert patch_texts(fold_project) == old
    (fold_checkout / FAKE).unlink()
    refused_changing_nothing(fold_project, runner, fold_checkout,
                             f"{FAKE} is deleted: --fold places changed lines", fold=True)
