"""A series that creates a file the base lacks (torch/utils/weak.py): base.sha256 and the
overlay MANIFEST record it as `absent`; overlay, apply (git apply and git am), --reverse and
refresh create and remove it."""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Dict

import pytest

from conftest import (FAKE, META, SeriesEdit, TmpProject, commit, commit_series, insert_line, make_small_project,
                      tree_hashes)

from patchset_lib import refresh_cmd, series_io
from patchset_lib.common import Runner, read_base_hashes, read_series

WEAK = "torch/utils/weak.py"
CREATING_SERIES = [
    ("Weak map in torch.utils", "Ada Author <ada@example.invalid>",
     {WEAK: lambda text: text + "class WeakIdKeyDictionary:\n    pass\n",
      META: insert_line(20, "from torch.utils.weak import WeakIdKeyDictionary")}, True),
    ("Fake tensor uses it", "Bob Builder <bob@example.invalid>",
     {FAKE: insert_line(30, "# patchset-test: uses the weak map"),
      WEAK: lambda text: text + "# patchset-test: second\n"}, True),
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def creating_series(tmp_project: TmpProject) -> Dict[str, bytes]:
    assert read_base_hashes_of(tmp_project).get(WEAK) == "absent"
    return tmp_project.make_series(CREATING_SERIES)


def read_base_hashes_of(project: TmpProject) -> Dict[str, str]:
    lines = (project.patches / "base.sha256").read_text().splitlines()
    return dict(line.split()[::-1] for line in lines if line.strip() and not line.startswith("#"))


def test_overlay_carries_the_created_file_with_an_absent_base(
    tmp_project: TmpProject, creating_series: Dict[str, bytes]
) -> None:
    proc = tmp_project.tool("overlay")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_project.overlay / WEAK).read_bytes() == creating_series[WEAK]
    manifest = (tmp_project.overlay / "MANIFEST").read_text().splitlines()
    assert f"{WEAK} absent {sha(creating_series[WEAK])}" in manifest
    assert tmp_project.tool("overlay", "--check").returncode == 0


@pytest.mark.parametrize("kind", ["plain", "git"])
def test_apply_creates_the_file_and_reverse_removes_it(
    tmp_project: TmpProject, creating_series: Dict[str, bytes], plain_checkout: Path,
    git_checkout: Path, kind: str
) -> None:
    checkout = plain_checkout if kind == "plain" else git_checkout
    pristine = tree_hashes(checkout)
    proc = tmp_project.tool("apply", "--checkout", str(checkout))
    assert proc.returncode == 0, proc.stderr
    assert (checkout / WEAK).read_bytes() == creating_series[WEAK]
    again = tmp_project.tool("apply", "--checkout", str(checkout))
    assert again.returncode == 0 and "already applied" in again.stdout
    back = tmp_project.tool("apply", "--checkout", str(checkout), "--reverse")
    assert back.returncode == 0, back.stderr
    assert not (checkout / WEAK).exists()
    assert tree_hashes(checkout) == pristine


def test_apply_refuses_a_checkout_that_has_the_file_already(
    tmp_project: TmpProject, creating_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    (plain_checkout / WEAK).parent.mkdir(parents=True, exist_ok=True)
    (plain_checkout / WEAK).write_text("# someone else's\n")
    before = tree_hashes(plain_checkout)
    proc = tmp_project.tool("apply", "--checkout", str(plain_checkout))
    assert proc.returncode == 1
    assert WEAK in proc.stderr
    assert tree_hashes(plain_checkout) == before


def test_refresh_records_a_created_file_as_absent(tmp_path: Path, runner: Runner) -> None:
    project = make_small_project(tmp_path / "proj")
    commit_series(project, runner, [SeriesEdit("Fake change\n\nWhy.\n", {FAKE: b"def fake():\n    return 20\n"})],
                  tmp_path)
    base = series_io.read_files(project.pristine, read_base_hashes(project))
    repo = tmp_path / "checkout"
    series_io.init_repo(repo, runner)
    editor = {"GIT_AUTHOR_NAME": "Editor", "GIT_AUTHOR_EMAIL": "editor@example.invalid",
              "GIT_COMMITTER_NAME": "Editor", "GIT_COMMITTER_EMAIL": "editor@example.invalid"}
    commit(repo, runner, "v1.13.1", base, editor)
    series_io.am_series(repo, read_series(project), runner, editor)
    created = b"class WeakIdKeyDictionary:\n    pass\n"
    uses = {META: base[META] + b"from torch.utils.weak import WeakIdKeyDictionary\n"}
    commit(repo, runner, "Weak map\n\nA new module.\n", {WEAK: created, **uses}, editor)
    assert refresh_cmd.cmd_refresh(project, runner, argparse.Namespace(source=str(repo), base=None, fold=False, into=None)) == 0
    assert read_base_hashes(project)[WEAK] == "absent"
    assert f"{WEAK} absent {sha(created)}\n" in project.overlay_manifest.read_text()
    assert [p.name for p in read_series(project)] == ["0001-Fake-change.patch", "0002-Weak-map.patch"]
