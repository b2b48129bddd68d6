"""`patchset apply`: wrong base, a patch that does not apply, twice, --reverse, git am; the pristine
trees the tests apply the series to."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict

import pytest

from conftest import (FAKE, META, REPO, TEST, TOOL_LIB, TmpProject, git, insert_line, make_patched_checkout,
                      pristine_checkout, run_tool, tree_hashes)

from patchset_lib.common import ABSENT, PatchsetError, Project, file_digest, find_project, read_base_hashes
from patchset_lib.series import copy_pristine_tree

BROKEN_SERIES = [
    ("First change", "Ada Author <ada@example.invalid>",
     {META: insert_line(20, "# patchset-test: first"), FAKE: insert_line(30, "# patchset-test: first")}, True),
    # Not exported: the next patch's context contains this line, so it cannot apply on base + first.
    ("Hidden change", "Nobody <nobody@example.invalid>", {FAKE: insert_line(200, "# patchset-test: hidden")}, False),
    ("Second change", "Bob Builder <bob@example.invalid>",
     {META: insert_line(60, "# patchset-test: second"),
      FAKE: lambda text: insert_line(201, "# patchset-test: second")(insert_line(100, "# ok")(text))}, True),
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected_tree(before: Dict[str, str], files: Dict[str, bytes]) -> Dict[str, str]:
    return {**before, **{path: sha(data) for path, data in files.items()}}


def test_changed_base_byte_is_refused_and_nothing_changes(
    tmp_project: TmpProject, good_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    target = plain_checkout / META
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    before = tree_hashes(plain_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(plain_checkout))

    assert proc.returncode == 1
    assert META in proc.stderr and "nothing changed" in proc.stderr
    assert tree_hashes(plain_checkout) == before


def test_series_whose_second_patch_fails_applies_nothing(tmp_project: TmpProject, plain_checkout: Path) -> None:
    tmp_project.make_series(BROKEN_SERIES)
    names = (tmp_project.patches / "series").read_text().split()
    assert len(names) == 2
    before = tree_hashes(plain_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(plain_checkout))

    assert proc.returncode == 1
    assert f"patch {names[1]} does not apply" in proc.stderr
    assert f"{FAKE}: hunk #2" in proc.stderr
    assert tree_hashes(plain_checkout) == before


def test_failing_series_leaves_git_checkout_untouched(tmp_project: TmpProject, git_checkout: Path) -> None:
    tmp_project.make_series(BROKEN_SERIES)
    head = git("rev-parse", "HEAD", cwd=git_checkout)
    before = tree_hashes(git_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(git_checkout))

    assert proc.returncode == 1 and "hunk #2" in proc.stderr
    assert git("rev-parse", "HEAD", cwd=git_checkout) == head
    assert tree_hashes(git_checkout) == before
    assert not (git_checkout / ".git" / "rebase-apply").exists()


def test_apply_twice_second_changes_nothing(
    tmp_project: TmpProject, good_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    before = tree_hashes(plain_checkout)

    first = tmp_project.tool("apply", "--checkout", str(plain_checkout))
    assert first.returncode == 0, first.stderr
    assert "applied 2 patches" in first.stdout
    patched = tree_hashes(plain_checkout)
    assert patched == expected_tree(before, good_series)
    assert patched[META] != before[META] and patched[TEST] != before[TEST]

    second = tmp_project.tool("apply", "--checkout", str(plain_checkout))
    assert second.returncode == 0, second.stderr
    assert "series already applied, nothing changed" in second.stdout
    assert tree_hashes(plain_checkout) == patched


def test_partly_applied_series_is_refused(
    tmp_project: TmpProject, good_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    (plain_checkout / FAKE).write_bytes(good_series[FAKE])
    before = tree_hashes(plain_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(plain_checkout))

    assert proc.returncode == 1 and "partly applied" in proc.stderr and FAKE in proc.stderr
    assert tree_hashes(plain_checkout) == before


def test_reverse_restores_pristine_bytes(
    tmp_project: TmpProject, good_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    pristine = tree_hashes(plain_checkout)
    assert tmp_project.tool("apply", "--checkout", str(plain_checkout)).returncode == 0
    assert tree_hashes(plain_checkout) != pristine

    back = tmp_project.tool("apply", "--checkout", str(plain_checkout), "--reverse")
    assert back.returncode == 0, back.stderr
    assert "reversed 2 patches" in back.stdout
    assert tree_hashes(plain_checkout) == pristine

    again = tmp_project.tool("apply", "--checkout", str(plain_checkout), "--reverse")
    assert again.returncode == 0 and "series not applied, nothing changed" in again.stdout
    assert tree_hashes(plain_checkout) == pristine


def test_git_checkout_gets_one_commit_per_patch_then_reverse_removes_them(
    tmp_project: TmpProject, good_series: Dict[str, bytes], git_checkout: Path
) -> None:
    base_head = git("rev-parse", "HEAD", cwd=git_checkout).strip()
    pristine = tree_hashes(git_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(git_checkout))
    assert proc.returncode == 0, proc.stderr
    assert "git am" in proc.stdout

    log = git("log", "--format=%an <%ae>|%s|%cn|%cI", f"{base_head}..HEAD", cwd=git_checkout).splitlines()
    assert log == [
        "Bob Builder <bob@example.invalid>|Fake tensor and tests: second change|Fake Tensor Patch Set|"
        "2026-12-02T00:00:00+00:00",
        "Ada Author <ada@example.invalid>|Meta utils: first change|Fake Tensor Patch Set|"
        "2026-12-02T00:00:00+00:00",
    ]
    assert "Why: meta utils: first change." in git("log", "-1", "--format=%b", "HEAD~1", cwd=git_checkout)
    assert git("status", "--porcelain", cwd=git_checkout) == ""
    assert tree_hashes(git_checkout) == expected_tree(pristine, good_series)

    back = tmp_project.tool("apply", "--checkout", str(git_checkout), "--reverse")
    assert back.returncode == 0, back.stderr
    assert "removed the 2 series commits" in back.stdout
    assert git("rev-parse", "HEAD", cwd=git_checkout).strip() == base_head
    assert tree_hashes(git_checkout) == pristine


def test_dirty_git_checkout_uses_git_apply_and_reverses(
    tmp_project: TmpProject, good_series: Dict[str, bytes], git_checkout: Path
) -> None:
    (git_checkout / "setup.py").write_text("# tracked later, dirty now\n")
    git("add", "setup.py", cwd=git_checkout)
    base_head = git("rev-parse", "HEAD", cwd=git_checkout)
    pristine = tree_hashes(git_checkout)

    proc = tmp_project.tool("apply", "--checkout", str(git_checkout))
    assert proc.returncode == 0 and "(git apply)" in proc.stdout, proc.stderr
    assert git("rev-parse", "HEAD", cwd=git_checkout) == base_head
    assert tree_hashes(git_checkout) == expected_tree(pristine, good_series)

    back = tmp_project.tool("apply", "--checkout", str(git_checkout), "--reverse")
    assert back.returncode == 0, back.stderr
    assert tree_hashes(git_checkout) == pristine


def test_missing_series_file_is_a_clear_error(tmp_project: TmpProject, plain_checkout: Path) -> None:
    before = tree_hashes(plain_checkout)
    proc = tmp_project.tool("apply", "--checkout", str(plain_checkout))
    assert proc.returncode == 1 and "series" in proc.stderr and "does not exist" in proc.stderr
    assert tree_hashes(plain_checkout) == before


# The command checks the whole series in a scratch dir first, so the rollback paths below are
# reached only by calling the writers directly with a series that fails half-way.

def test_git_apply_writer_restores_every_byte_when_a_later_patch_fails(
    tmp_project: TmpProject, plain_checkout: Path
) -> None:
    from patchset_lib.series import apply_with_git_apply, load_series
    from patchset_lib.common import PatchsetError, Project, Runner

    tmp_project.make_series(BROKEN_SERIES)
    series = load_series(Project(tmp_project.root))
    before = tree_hashes(plain_checkout)

    with pytest.raises(PatchsetError, match=rf"patch {series[1].name} does not apply: {FAKE}: hunk #2"):
        apply_with_git_apply(Runner(echo=False), plain_checkout, series, [FAKE, META, TEST], {}, reverse=False)
    assert tree_hashes(plain_checkout) == before


def test_git_am_writer_aborts_and_resets_when_a_later_patch_fails(
    tmp_project: TmpProject, git_checkout: Path
) -> None:
    from patchset_lib.series import apply_with_git_am, load_series
    from patchset_lib.common import PatchsetError, Project, Runner

    tmp_project.make_series(BROKEN_SERIES)
    project = Project(tmp_project.root)
    head = git("rev-parse", "HEAD", cwd=git_checkout)
    before = tree_hashes(git_checkout)

    with pytest.raises(PatchsetError, match="git am failed"):
        apply_with_git_am(project, Runner(echo=False), git_checkout, load_series(project), [FAKE, META, TEST], {})
    assert git("rev-parse", "HEAD", cwd=git_checkout) == head
    assert tree_hashes(git_checkout) == before
    assert git("status", "--porcelain", cwd=git_checkout) == ""
    assert not (git_checkout / ".git" / "rebase-apply").exists()


# ---- pristine trees made from a checkout the series was applied to ---------------------------


def test_pristine_tree_from_a_patched_checkout_takes_the_series_again(tmp_path: Path) -> None:
    project = find_project(TOOL_LIB)
    base = read_base_hashes(project)
    patched = make_patched_checkout(tmp_path / "applied")  # as `patchset run` leaves .cache/checkout
    created = [path for path, digest in base.items() if digest == ABSENT]
    assert created and all((patched / path).is_file() for path in created)

    fresh = copy_pristine_tree(project, patched, tmp_path / "fresh", ["test"])

    assert {path: file_digest(fresh / path) for path in base} == base
    reference = pristine_checkout(tmp_path / "reference")
    assert tree_hashes(fresh / "test") == tree_hashes(reference / "test")
    proc = run_tool(REPO, "apply", "--checkout", str(fresh))
    assert proc.returncode == 0, proc.stderr


def test_pristine_tree_refuses_a_pristine_copy_that_does_not_match_the_pins(
    tmp_project: TmpProject, tmp_path: Path
) -> None:
    source = tmp_project.write_tree(tmp_path / "source")
    copy = tmp_project.root / ".cache" / "pristine" / META
    copy.write_bytes(copy.read_bytes() + b"# not v1.13.1\n")

    with pytest.raises(PatchsetError, match=META):
        copy_pristine_tree(Project(tmp_project.root), source, tmp_path / "fresh", ["test"])
