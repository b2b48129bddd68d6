"""`patchset export`: a git series with cover letter (for `git am`) and a quilt directory (DEP-3).

Both exports are applied for real: `git am` into a repo of the pristine base files, and
`quilt push -a` / `quilt pop -a` on a copy of a small source tree.
"""
import argparse
import shutil
from pathlib import Path
from typing import Sequence

import pytest
from conftest import (
    IDENTITY,
    SMALL_BASE,
    SeriesEdit,
    commit_series,
    make_small_project,
    sha,
    tree_hashes,
)

from patchset_lib import export_cmd, series_io
from patchset_lib.common import PatchsetError, Project, Runner, read_series

PRISTINE = SMALL_BASE
COVER = "Subject of the series\n\nWhat the series does, briefly.\n"
FIRST_MESSAGE = ("Weak memo for converters\n\nWhy: finalizers leak.\n\nWhat: weak refs we own.\n\n"
                 "Bug: pytorch/pytorch#80544\nForwarded: no\n")
RESULT = {
    "torch/_subclasses/meta_utils.py": b"def meta():\n    return 10\n",
    "torch/_subclasses/fake_tensor.py": b"def fake():\n    return 20\n",
    "test/test_fake_tensor.py": PRISTINE["test/test_fake_tensor.py"] + b"# ours\n",
}
EDITS: Sequence[SeriesEdit] = (
    SeriesEdit(FIRST_MESSAGE,
               {"torch/_subclasses/meta_utils.py": RESULT["torch/_subclasses/meta_utils.py"]},
               author_date="2026-12-02T09:00:00+00:00"),
    SeriesEdit("Fallback aliasing\n\nOutputs alias inputs.\n",
               {"torch/_subclasses/fake_tensor.py": RESULT["torch/_subclasses/fake_tensor.py"]},
               author_date="2026-12-02T09:10:00+00:00"),
    SeriesEdit("Add patch-set tests to test_fake_tensor.py\n\nGenerated.\n",
               {"test/test_fake_tensor.py": RESULT["test/test_fake_tensor.py"]},
               author_date="2026-12-02T00:00:00+00:00"),
)


@pytest.fixture
def project(tmp_path: Path, runner: Runner) -> Project:
    project = make_small_project(tmp_path / "proj")
    (project.patches / "cover-letter.txt").write_text(COVER)
    commit_series(project, runner, EDITS, tmp_path)
    return project


def export(project: Project, runner: Runner, fmt: str, out: Path) -> int:
    return export_cmd.cmd_export(project, runner, argparse.Namespace(format=fmt, out=str(out)))


# ---- git ---------------------------------------------------------------------------------------


def test_git_export_is_byte_reproducible(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "git", tmp_path / "a")
    export(project, runner, "git", tmp_path / "b")
    a, b = tree_hashes(tmp_path / "a"), tree_hashes(tmp_path / "b")
    assert a == b
    assert sorted(a) == [
        "0000-cover-letter.patch",
        "0001-Weak-memo-for-converters.patch",
        "0002-Fallback-aliasing.patch",
        "0003-Add-patch-set-tests-to-test_fake_tensor.py.patch",
    ]


def test_git_cover_letter_has_subject_blurb_base(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "git", tmp_path / "out")
    cover = (tmp_path / "out/0000-cover-letter.patch").read_text()
    assert "Subject: [PATCH 0/3] Subject of the series\n" in cover
    assert "What the series does, briefly." in cover
    assert "*** SUBJECT HERE ***" not in cover and "*** BLURB HERE ***" not in cover
    assert "PyTorch tag v1.13.1" in cover
    for path, data in PRISTINE.items():
        assert f"{sha(data)}  {path}" in cover
    base = series_io.make_base_repo(PRISTINE, tmp_path / "base", runner)
    assert cover.rstrip().endswith(f"base-commit: {base}")
    first = (tmp_path / "out/0001-Weak-memo-for-converters.patch").read_text()
    assert "Subject: [PATCH 1/3] Weak memo for converters" in first
    assert "Date: Wed, 2 Dec 2026 09:00:00 +0000" in first
    for path in (tmp_path / "out").iterdir():
        assert "://" not in path.read_text()


def test_git_export_applies_with_git_am(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "git", tmp_path / "out")
    repo = tmp_path / "am"
    base = series_io.make_base_repo(PRISTINE, repo, runner)
    patches = sorted(p for p in (tmp_path / "out").iterdir() if not p.name.startswith("0000-"))
    env = {"GIT_COMMITTER_NAME": "someone", "GIT_COMMITTER_EMAIL": "someone@example.invalid"}
    series_io.am_series(repo, patches, runner, env)
    assert series_io.read_files(repo, RESULT) == RESULT
    log = runner.git("log", "--reverse", "--format=%an|%ae|%aI|%s", f"{base}..HEAD", cwd=repo,
                     capture=True).stdout.splitlines()
    assert log == [
        f"{IDENTITY['name']}|{IDENTITY['email']}|2026-12-02T09:00:00+00:00|Weak memo for converters",
        f"{IDENTITY['name']}|{IDENTITY['email']}|2026-12-02T09:10:00+00:00|Fallback aliasing",
        f"{IDENTITY['name']}|{IDENTITY['email']}|2026-12-02T00:00:00+00:00|"
        "Add patch-set tests to test_fake_tensor.py",
    ]
    trailers = runner.git("log", "-1", "--format=%(trailers:only,unfold)", "HEAD~2",
                          cwd=repo, capture=True).stdout
    assert "Bug: pytorch/pytorch#80544" in trailers


# ---- quilt -------------------------------------------------------------------------------------


def test_quilt_export_has_dep3_headers(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "q")
    out = tmp_path / "q"
    names = (out / "series").read_text().splitlines()
    assert names == [p.name for p in read_series(project)]
    first = (out / names[0]).read_text()
    header, diff = first.split("\n---\n", 1)
    series_sha = sha(b"".join(p.read_bytes() for p in read_series(project)))[:12]
    assert header.splitlines() == [
        "Description: Weak memo for converters",
        " Why: finalizers leak.",
        " .",
        " What: weak refs we own.",
        f"Author: {IDENTITY['name']} <{IDENTITY['email']}>",
        f"Origin: vendor, fake-tensor patch set for PyTorch v1.13.1 (series sha256 {series_sha})",
        "Bug: pytorch/pytorch#80544",
        "Forwarded: no",
        "Last-Update: 2026-12-02",
    ]
    assert diff.startswith(" torch/_subclasses/meta_utils.py | 2 +-\n")
    assert "\ndiff --git a/torch/_subclasses/meta_utils.py b/torch/_subclasses/meta_utils.py\n" in diff
    second = (out / names[1]).read_text()
    assert "\nForwarded: no\n" in second and "\nBug:" not in second
    for name in names:
        text = (out / name).read_text()
        assert not text.startswith("From ") and "\nFrom: " not in text and "://" not in text
        assert text.startswith("Description: ")


def test_quilt_export_is_byte_reproducible(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "a")
    export(project, runner, "quilt", tmp_path / "b")
    assert tree_hashes(tmp_path / "a") == tree_hashes(tmp_path / "b")
    assert len(tree_hashes(tmp_path / "a")) == 4  # series + 3 patches


def test_quilt_push_and_pop_on_a_source_tree(project: Project, runner: Runner, tmp_path: Path) -> None:
    export(project, runner, "quilt", tmp_path / "q")
    tree = tmp_path / "pytorch-1.13.1"
    series_io.write_files(tree, {**PRISTINE, "setup.py": b"# untouched\n",
                                 "torch/_subclasses/__init__.py": b""})
    before = tree_hashes(tree)
    env = {"QUILT_PATCHES": str(tmp_path / "q")}
    pushed = runner.run(["quilt", "--quiltrc", "-", "push", "-a"], cwd=tree, env=env, capture=True,
                        check=False)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    after = tree_hashes(tree, skip=".pc")
    assert after == {**before, **{p: sha(d) for p, d in RESULT.items()}}
    popped = runner.run(["quilt", "--quiltrc", "-", "pop", "-a"], cwd=tree, env=env, capture=True,
                        check=False)
    assert popped.returncode == 0, popped.stdout + popped.stderr
    assert tree_hashes(tree, skip=".pc") == before


# ---- refusals ----------------------------------------------------------------------------------


def test_refuses_non_empty_out_dir(project: Project, runner: Runner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(PatchsetError, match="not an empty directory"):
        export(project, runner, "git", out)
    assert [p.name for p in out.iterdir()] == ["keep"]


def test_missing_pristine_files_say_run_setup(project: Project, runner: Runner, tmp_path: Path) -> None:
    shutil.rmtree(project.pristine)
    with pytest.raises(PatchsetError, match="run `patchset setup`"):
        export(project, runner, "quilt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_wrong_pristine_file_is_refused(project: Project, runner: Runner, tmp_path: Path) -> None:
    (project.pristine / "torch/_subclasses/fake_tensor.py").write_bytes(b"changed\n")
    with pytest.raises(PatchsetError, match="fake_tensor.py differs from the 1.13.1 base"):
        export(project, runner, "git", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_patch_that_does_not_apply_writes_nothing(project: Project, runner: Runner,
                                                  tmp_path: Path) -> None:
    first = read_series(project)[0]
    first.write_text(first.read_text().replace("-    return 1", "-    return 7"))
    with pytest.raises(PatchsetError, match="git am failed"):
        export(project, runner, "git", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_warns_when_generated_tests_drifted(project: Project, runner: Runner,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (project.root / "test").mkdir()
    generated = project.root / "test/test_fake_tensor.py"
    generated.write_bytes(RESULT["test/test_fake_tensor.py"])
    assert export(project, runner, "git", tmp_path / "a") == 0
    assert "warning" not in capsys.readouterr().err
    generated.write_text("import unittest\n\n\nclass PatchSetOnly(unittest.TestCase):\n    pass\n")
    assert export(project, runner, "git", tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert "warning: test/test_fake_tensor.py differs from pristine base + series" in err
    assert len(list((tmp_path / "b").iterdir())) == 4
