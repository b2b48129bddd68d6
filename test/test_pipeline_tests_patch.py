"""`patchset tests-patch`: our tests merged into upstream's test file, as the series' last patch.

Synthetic project in tmp_path: pristine base files (a small upstream-style test file), a one-patch
series made with git, our own test file. No torch needed: the test files use unittest.
"""
import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    IDENTITY,
    SMALL_BASE,
    TEST,
    SeriesEdit,
    commit_series,
    copy_tool,
    make_small_project,
    run_tool,
    tree_hashes,
)

from patchset_lib import tests_patch, tests_patch_cmd
from patchset_lib.common import PatchsetError, Project, Runner, read_series
from patchset_lib.series import apply_series

UPSTREAM_TEST = '''# Owner(s): ["module: meta tensors"]

import unittest
from unittest import TestCase


class FakeTensorTest(TestCase):
    def test_upstream_one(self):
        self.assertEqual(1 + 1, 2)

    def test_upstream_two(self):
        self.assertTrue(True)


def helper():
    return 1


if __name__ == "__main__":
    unittest.main()
'''

OUR_TEST = '''# Owner(s): ["module: meta tensors"]
"""The patch set's tests."""
import unittest
import weakref
from unittest import TestCase

LIMIT = 3


class PatchSetWeakMemoTest(TestCase):
    def test_ours_weakref_dies(self):
        class Box:
            pass

        box = Box()
        ref = weakref.ref(box)
        del box
        self.assertIsNone(ref())
        self.assertEqual(LIMIT, 3)


if __name__ == "__main__":
    unittest.main()
'''

PRISTINE = {**SMALL_BASE, TEST: UPSTREAM_TEST.encode()}


def make_project(root: Path, ours: str = OUR_TEST) -> Project:
    """A small project with upstream's test file as its base and ours in test/, and the tool."""
    project = make_small_project(root, PRISTINE)
    copy_tool(root)
    project.tests.mkdir()
    (project.tests / "test_fake_tensor.py").write_text(ours)
    return project


FIRST_EDIT = SeriesEdit("Memoize weakly",
                        {"torch/_subclasses/meta_utils.py": b"def meta():\n    return 10\n"})


@pytest.fixture
def project(tmp_path: Path, runner: Runner) -> Project:
    project = make_project(tmp_path / "proj")
    commit_series(project, runner, [FIRST_EDIT], tmp_path)
    return project


def run_tests_patch(project: Project, runner: Runner, check: bool = False) -> int:
    return tests_patch_cmd.cmd_tests_patch(project, runner, argparse.Namespace(check=check))


# ---- merging (pure) ----------------------------------------------------------------------------


def test_merge_adds_only_missing_imports_and_our_code_before_main() -> None:
    merged = tests_patch.merge_tests(UPSTREAM_TEST, OUR_TEST)
    compile(merged, "merged", "exec")
    assert merged.count("import weakref") == 1
    assert merged.count("import unittest\n") == 1
    assert merged.count("from unittest import TestCase") == 1
    assert merged.count('if __name__ == "__main__":') == 1
    lines = merged.splitlines()
    begin_imports = lines.index(tests_patch.BEGIN_IMPORTS.rstrip("\n"))
    assert lines[begin_imports + 1] == "import weakref"
    assert lines[begin_imports - 1] == "from unittest import TestCase"
    ours = merged.index("class PatchSetWeakMemoTest")
    assert merged.index("def helper():") < merged.index(tests_patch.BEGIN_TESTS) < ours
    assert ours < merged.index(tests_patch.END_TESTS) < merged.index('if __name__ == "__main__":')
    assert '"""The patch set\'s tests."""' not in merged  # our module docstring is not code
    # Upstream's own lines are all still there, in order.
    upstream_lines = UPSTREAM_TEST.splitlines()
    positions = [lines.index(line, 0) for line in upstream_lines if line.strip()]
    assert positions == sorted(positions)


def test_merge_is_deterministic() -> None:
    assert tests_patch.merge_tests(UPSTREAM_TEST, OUR_TEST) == tests_patch.merge_tests(
        UPSTREAM_TEST, OUR_TEST)


@pytest.mark.parametrize("ours, name", [
    (OUR_TEST.replace("class PatchSetWeakMemoTest", "class FakeTensorTest"), "FakeTensorTest"),
    (OUR_TEST.replace("LIMIT = 3", "helper = 3").replace("LIMIT", "helper"), "helper"),
    (OUR_TEST.replace("from unittest import TestCase", "from unittest.mock import Mock as TestCase"),
     "TestCase"),
])
def test_merge_refuses_names_upstream_already_binds(ours: str, name: str) -> None:
    with pytest.raises(PatchsetError) as info:
        tests_patch.merge_tests(UPSTREAM_TEST, ours)
    assert f"`{name}`" in str(info.value)
    assert "rename ours" in str(info.value)


def test_merge_refuses_future_import_and_missing_main_block() -> None:
    with pytest.raises(PatchsetError, match="__future__"):
        tests_patch.merge_tests(UPSTREAM_TEST, "from __future__ import annotations\n" + OUR_TEST)
    no_main = UPSTREAM_TEST.split('if __name__ == "__main__":')[0]
    with pytest.raises(PatchsetError, match="no `if __name__"):
        tests_patch.merge_tests(no_main, OUR_TEST)


# ---- the command -------------------------------------------------------------------------------


def test_generates_last_patch_and_series_entry(project: Project, runner: Runner) -> None:
    assert run_tests_patch(project, runner) == 0
    names = [p.name for p in read_series(project)]
    assert names == ["0001-Memoize-weakly.patch", "0002-Add-patch-set-tests-to-test_fake_tensor.py.patch"]
    text = (project.patches / names[1]).read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] Add patch-set tests to test_fake_tensor.py\n" in text
    assert "do not edit" in text and "patchset tests-patch" in text
    assert f"From: {IDENTITY['name']} <{IDENTITY['email']}>" in text
    assert "Date: Wed, 2 Dec 2026 00:00:00 +0000" in text
    assert "+class PatchSetWeakMemoTest(TestCase):" in text
    assert text.count("\ndiff --git ") == 1 and "b/test/test_fake_tensor.py" in text


def test_applied_checkout_runs_upstream_and_our_tests(project: Project, runner: Runner,
                                                     tmp_path: Path) -> None:
    run_tests_patch(project, runner)
    tree = tmp_path / "checkout"
    shutil.copytree(project.pristine, tree)
    apply_series(project, runner, tree)
    assert (tree / "torch/_subclasses/meta_utils.py").read_bytes() == b"def meta():\n    return 10\n"
    proc = subprocess.run([sys.executable, "test_fake_tensor.py", "-v"], cwd=tree / "test",
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Ran 3 tests" in proc.stderr
    for name in ("test_upstream_one", "test_upstream_two", "test_ours_weakref_dies"):
        assert f"{name} (" in proc.stderr


def test_regeneration_is_byte_identical_and_idempotent(project: Project, runner: Runner,
                                                       capsys: pytest.CaptureFixture) -> None:
    run_tests_patch(project, runner)
    first = tree_hashes(project.patches)
    (project.patches / "0002-Add-patch-set-tests-to-test_fake_tensor.py.patch").unlink()
    project.series_file.write_text("0001-Memoize-weakly.patch\n")
    run_tests_patch(project, runner)
    assert tree_hashes(project.patches) == first
    capsys.readouterr()
    run_tests_patch(project, runner)
    assert "already up to date" in capsys.readouterr().out
    assert tree_hashes(project.patches) == first


def test_check_fails_on_drift_and_changes_nothing(project: Project, runner: Runner) -> None:
    with pytest.raises(PatchsetError, match="no tests patch"):
        run_tests_patch(project, runner, check=True)
    run_tests_patch(project, runner)
    assert run_tests_patch(project, runner, check=True) == 0
    (project.tests / "test_fake_tensor.py").write_text(OUR_TEST.replace("LIMIT = 3", "LIMIT = 4"))
    before = tree_hashes(project.patches)
    with pytest.raises(PatchsetError) as info:
        run_tests_patch(project, runner, check=True)
    assert "patches/0002-Add-patch-set-tests-to-test_fake_tensor.py.patch is out of date" in str(info.value)
    assert tree_hashes(project.patches) == before
    run_tests_patch(project, runner)
    assert tree_hashes(project.patches) != before
    assert run_tests_patch(project, runner, check=True) == 0


def test_builds_on_the_file_as_left_by_preceding_patches(tmp_path: Path, runner: Runner) -> None:
    project = make_project(tmp_path / "proj")
    upstream_edit = UPSTREAM_TEST.replace("def helper():", "class UpstreamAdded(TestCase):\n"
                                          "    def test_added(self):\n        pass\n\n\ndef helper():")
    commit_series(project, runner, [FIRST_EDIT, SeriesEdit("Touch the test", {
        "test/test_fake_tensor.py": upstream_edit.encode()})], tmp_path)
    run_tests_patch(project, runner)
    series = read_series(project)
    assert [p.name[:4] for p in series] == ["0001", "0002", "0003"]
    tree = tmp_path / "checkout"
    shutil.copytree(project.pristine, tree)
    apply_series(project, runner, tree)
    proc = subprocess.run([sys.executable, "test_fake_tensor.py"], cwd=tree / "test",
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Ran 4 tests" in proc.stderr, proc.stderr


def test_collision_is_reported_before_anything_is_written(project: Project, runner: Runner) -> None:
    (project.tests / "test_fake_tensor.py").write_text(
        OUR_TEST.replace("class PatchSetWeakMemoTest", "class FakeTensorTest"))
    before = tree_hashes(project.patches)
    with pytest.raises(PatchsetError, match="`FakeTensorTest`"):
        run_tests_patch(project, runner)
    assert tree_hashes(project.patches) == before


def test_tests_patch_must_be_last(project: Project, runner: Runner) -> None:
    run_tests_patch(project, runner)
    names = [p.name for p in read_series(project)]
    project.series_file.write_text(f"{names[1]}\n{names[0]}\n")
    with pytest.raises(PatchsetError, match="must be the last"):
        run_tests_patch(project, runner)


def test_cli_check_exit_codes(project: Project) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return run_tool(project.root, *args)  # the tmp project's own copy of build_scripts/patchset

    failed = cli("tests-patch", "--check")
    assert failed.returncode == 1 and "no tests patch" in failed.stderr
    assert cli("tests-patch").returncode == 0
    assert cli("tests-patch", "--check").returncode == 0
    (project.tests / "test_fake_tensor.py").write_text(OUR_TEST.replace("LIMIT = 3", "LIMIT = 5"))
    drift = cli("tests-patch", "--check")
    assert drift.returncode == 1
    assert "0002-Add-patch-set-tests-to-test_fake_tensor.py.patch" in drift.stderr
