"""`patchset test --quick`: which tests a change selects, and why.

A throw-away git repo shaped like this project (patches/, test/, build_scripts/patchset_lib/) is
committed, then changed; the selection is read from `quick_tests` and `test_cmd`, never run.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import git
from test_series_per_patch import quick_targets

from patchset_lib import cli, quick_tests, test_cmd
from patchset_lib.common import Project, Runner

PATCH = "patches/0002-Second.patch"
LAST = "test/test_series_per_patch.py::test_first_k_patches_pass_their_tests[0003]"
FILES: Dict[str, str] = {
    "patches/series": "0001-First.patch\n0002-Second.patch\n0003-Third.patch\n",
    "patches/0001-First.patch": "diff --git a/torch/a.py b/torch/a.py\n",
    PATCH: "diff --git a/torch/a.py b/torch/a.py\n",
    "patches/0003-Third.patch": "diff --git a/torch/b.py b/torch/b.py\n",
    "patches/upstream-status.json": "{}\n",
    "build_scripts/patchset_lib/export_cmd.py": "",
    "build_scripts/patchset_lib/authorship.py": "",
    "build_scripts/patchset_lib/apt.py": "",
    "build_scripts/patchset_lib/fold.py": "",
    "build_scripts/patchset_lib/quick_tests.py": "",
    "test/conftest.py": "",
    "test/crossref.py": "",
    "test/test_crossref_fallback_ops.py": "import crossref\n",
    "test/test_series_per_patch.py": "from patchset_lib.quick_tests import HARNESS_FILES\n",
    "test/test_pipeline_export.py": "from patchset_lib import authorship, export_cmd\n",
    "test/test_pipeline_conda.py": "from patchset_lib.authorship import check\n",
    "test/test_pipeline_refresh.py": "",
    "test/test_pipeline_readme.py": "",
}
EVERY_PIPELINE = ["test/test_pipeline_conda.py", "test/test_pipeline_export.py",
                  "test/test_pipeline_readme.py", "test/test_pipeline_refresh.py"]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    write(root, FILES)
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "committed", cwd=root)
    return Project(root)


def write(root: Path, files: Dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def chosen(project: Project, runner: Runner, files: Dict[str, str]) -> List[str]:
    write(project.root, files)
    return quick_tests.selected(quick_tests.picks(project, quick_tests.changed_files(project, runner)))


def test_nothing_changed_selects_nothing_and_runs_nothing(project: Project, runner: Runner,
                                                          capsys: pytest.CaptureFixture) -> None:
    assert chosen(project, runner, {}) == []
    args = argparse.Namespace(quick=True, pytest_args=[])
    assert test_cmd.cmd_test(project, runner, args) == 0  # before setup: nothing ran
    assert "no tests to run" in capsys.readouterr().out


def test_a_changed_patch_runs_its_series_test_files_after_the_whole_series(project: Project,
                                                                           runner: Runner) -> None:
    edited = ("diff --git a/torch/a.py b/torch/a.py\ndiff --git a/test/test_weak.py b/test/test_weak.py\n"
              "diff --git a/test/test_ops.py b/test/test_ops.py\n")
    assert chosen(project, runner, {PATCH: edited}) == ["test/test_series_consistency.py", LAST]
    assert quick_tests.series_files(project, [PATCH]) == ["test/test_weak.py"]
    lines = quick_tests.describe(quick_tests.picks(project, [PATCH]))
    assert f"quick: {PATCH}: its test files test/test_weak.py, after the whole series -> {LAST}" in lines
    assert any("test/test_ops.py: not run" in line for line in lines)


def test_other_series_files_run_the_consistency_test(project: Project, runner: Runner) -> None:
    assert chosen(project, runner, {"patches/upstream-status.json": "{\"a\": 1}\n"}) == [
        "test/test_series_consistency.py"]


@pytest.mark.parametrize("module, tests", [
    ("export_cmd", ["test/test_pipeline_export.py"]),  # by name (and import)
    ("authorship", ["test/test_pipeline_conda.py", "test/test_pipeline_export.py"]),  # by import
    ("fold", ["test/test_pipeline_readme.py", "test/test_pipeline_refresh.py"]),  # MODULE_TESTS
    ("apt", EVERY_PIPELINE),  # no test names it: all of them
    ("quick_tests", [LAST]),  # the per-patch harness imports it: its last prefix only
])
def test_a_changed_tool_module_runs_its_pipeline_tests(project: Project, runner: Runner, module: str,
                                                       tests: List[str]) -> None:
    assert chosen(project, runner, {f"build_scripts/patchset_lib/{module}.py": "# changed\n"}) == tests


def test_changed_and_untracked_test_files(project: Project, runner: Runner) -> None:
    assert chosen(project, runner, {"test/test_pipeline_refresh.py": "# changed\n",
                                    "test/test_pipeline_new.py": "# untracked\n"}) == [
        "test/test_pipeline_new.py", "test/test_pipeline_refresh.py"]
    git("add", "-A", cwd=project.root)
    git("commit", "-q", "-m", "both", cwd=project.root)
    assert chosen(project, runner, {"test/crossref.py": "# a helper\n"}) == ["test/test_crossref_fallback_ops.py"]
    git("checkout", "-q", "--", "test/crossref.py", cwd=project.root)
    assert chosen(project, runner, {"test/conftest.py": "# fixtures\n"}) == sorted(
        [*EVERY_PIPELINE, "test/test_pipeline_new.py"])


def test_the_per_patch_harness_runs_its_last_prefix_only(project: Project, runner: Runner) -> None:
    assert chosen(project, runner, {"test/test_series_per_patch.py": "# changed\n"}) == [LAST]


def test_the_harness_keeps_the_quick_files_targets_and_fake_tensor_whole() -> None:
    targets = ["test/test_fake_tensor.py::TestUpstream", "test/test_weak.py::WeakTest",
               "test/test_meta.py::MetaTest"]
    assert quick_targets(targets, ["test/test_meta.py"]) == ["test/test_meta.py::MetaTest"]
    assert quick_targets(targets, ["test/test_fake_tensor.py", "test/test_weak.py"]) == [
        "test/test_fake_tensor.py", "test/test_weak.py::WeakTest"]


def test_quick_pytest_command_and_arguments(project: Project) -> None:
    args = cli.parse_args(cli.build_parser(), ["test", "--quick", "--", "-x"])
    assert args.quick and args.pytest_args == ["--", "-x"]
    full = cli.parse_args(cli.build_parser(), ["test", "-k", "foo"])
    assert not full.quick and full.pytest_args == ["-k", "foo"]
    assert test_cmd.pytest_command(project, ["--", "-x"], [LAST]) == [
        project.venv_python, "-m", "pytest", LAST, "-q", "-p", "no:cacheprovider", "-x"]
    assert test_cmd.pytest_command(project, [])[3] == project.tests  # the full run: all of test/
