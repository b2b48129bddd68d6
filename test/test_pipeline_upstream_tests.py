"""Tests of `patchset upstream-tests`: junit parsing on real pytest runs, the comparison, and an
end-to-end run on a synthetic checkout with a throwaway project venv and overlay.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "build_scripts"))
sys.path.insert(0, str(HERE))

import test_pipeline_install as fixtures  # noqa: E402  (throwaway project/venv builders)
from patchset_lib import overlay_hook, upstream_tests_cmd as ut  # noqa: E402
from patchset_lib.common import PatchsetError, Project, Runner  # noqa: E402

SYNTHETIC_TESTS = '''\
import unittest

import pytest


def test_passes():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3


@pytest.mark.skip(reason="skipped on purpose")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known bug")
def test_xfail_marker():
    assert False


def test_xfail_imperative():
    pytest.xfail("decided at run time")


class Case(unittest.TestCase):
    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertEqual(1, 2)


@pytest.fixture
def broken():
    raise RuntimeError("fixture setup fails")


def test_setup_error(broken):
    pass
'''


def run_pytest_junit(tmp_path: Path, source: str) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # keep rootdir here, away from any outer ini
    (tmp_path / "test_synthetic.py").write_text(source)
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", "test_synthetic.py"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some tests fail on purpose
    return junit


def test_parse_junit_of_a_real_run(tmp_path: Path) -> None:
    outcomes = ut.parse_junit(run_pytest_junit(tmp_path, SYNTHETIC_TESTS))
    assert outcomes == {
        "test_synthetic::test_passes": "passed",
        "test_synthetic::test_fails": "failed",
        "test_synthetic::test_skipped": "skipped",
        "test_synthetic::test_xfail_marker": "xfailed",
        "test_synthetic::test_xfail_imperative": "xfailed",
        "test_synthetic.Case::test_expected_failure": "xfailed",
        "test_synthetic::test_setup_error": "failed",
    }
    assert ut.count_outcomes(outcomes) == {"passed": 1, "failed": 2, "skipped": 1, "xfailed": 3, "xpassed": 0}


def test_tests_expected_to_fail_that_pass_are_xpassed_not_failed(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        import unittest

        import pytest

        class Case(unittest.TestCase):
            @unittest.expectedFailure
            def test_expected_failure_passes(self):
                pass

        @pytest.mark.xfail(strict=True)
        def test_strict_xfail_passes():
            pass

        def test_meta_list_entry_passes():  # test_meta.py's own expected-failure lists
            raise RuntimeError("unexpected success aten.kthvalue.default")

        def test_fails():
            raise RuntimeError("an unexpected success is not this message")
        ''')
    assert ut.parse_junit(run_pytest_junit(tmp_path, source)) == {
        "test_synthetic.Case::test_expected_failure_passes": "xpassed",
        "test_synthetic::test_strict_xfail_passes": "xpassed",
        "test_synthetic::test_meta_list_entry_passes": "xpassed",
        "test_synthetic::test_fails": "failed",
    }


def test_teardown_error_after_a_pass_counts_as_failed(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        import pytest

        @pytest.fixture
        def breaks_in_teardown():
            yield
            raise RuntimeError("teardown fails")

        def test_ok():
            pass

        def test_teardown(breaks_in_teardown):
            pass
        ''')
    assert ut.parse_junit(run_pytest_junit(tmp_path, source)) == {
        "test_synthetic::test_ok": "passed",
        "test_synthetic::test_teardown": "failed",
    }


def test_regressions_and_fixed_lists() -> None:
    unpatched = {"a": "passed", "b": "failed", "c": "failed", "d": "skipped", "e": "failed"}
    patched = {"a": "failed", "b": "passed", "c": "failed", "d": "failed", "e": "xfailed", "new": "failed"}
    assert ut.regressions(unpatched, patched) == ["a", "d", "new"]
    assert ut.fixed_by_series(unpatched, patched) == ["b"]
    assert ut.regressions(unpatched, unpatched) == []
    # upstream's expected-failure lists: a test that fails unpatched, as listed, and passes patched
    # is what the series fixes, never a regression; in the series' own file it is a failure
    unpatched = {"x": "xfailed", "y": "xfailed", "z": "passed"}
    patched = {"x": "xpassed", "y": "passed", "z": "xpassed"}
    assert ut.regressions(unpatched, patched) == []
    assert ut.fixed_by_series(unpatched, patched) == ["x", "y"]
    assert ut.series_failures({"a": "passed", "x": "xpassed", "f": "failed", "s": "xfailed"}) == ["f", "x"]


def test_table_has_one_row_per_outcome_and_both_sides() -> None:
    table = ut.format_table("test/x.py", {"a": "passed", "b": "skipped"}, {"a": "passed", "b": "passed"})
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert rows == {
        "passed": ["passed", "1", "|", "2"],
        "failed": ["failed", "0", "|", "0"],
        "skipped": ["skipped", "1", "|", "0"],
        "xfailed": ["xfailed", "0", "|", "0"],
        "xpassed": ["xpassed", "0", "|", "0"],
    }
    assert "unpatched" in table.splitlines()[1] and "patched" in table.splitlines()[1]


def test_check_loaded_names_the_wrong_file(tmp_path: Path) -> None:
    want = {"torch._subclasses.fake_tensor": tmp_path / "overlay" / "fake_tensor.py"}
    assert ut.check_loaded("patched", {"torch._subclasses.fake_tensor": str(want["torch._subclasses.fake_tensor"])},
                           want) is None
    error = ut.check_loaded("patched", {"torch._subclasses.fake_tensor": "/usr/lib/x/fake_tensor.py"}, want)
    assert error is not None and "/usr/lib/x/fake_tensor.py" in error


def test_parse_selection() -> None:
    assert ut.parse_selection("test_meta.py", "TestMetaConverter") == ut.Selection(
        "test/test_meta.py", ("-k", "TestMetaConverter"))
    selection = ut.parse_selection("test/test_fake_tensor.py::FakeTensorTest", None)
    assert selection.target() == "test_fake_tensor.py::FakeTensorTest"
    assert ut.DEFAULT_SELECTIONS[1].label == (
        "test/test_meta.py -k 'TestMetaConverter or TestMetaKernelsMatchCPU'")
    assert ut.DEFAULT_SELECTIONS[2].label == f"test/test_ops.py -k {shlex.quote(ut.FAKE_OPS_KEYWORD)}"
    assert ut.DEFAULT_SELECTIONS[3].label == "test/test_proxy_tensor.py -k 'not TestProxyTensorOpInfo'"


# --- end to end on a synthetic checkout ---------------------------------------------------------

CHECKOUT_TESTS = '''\
import pytest
import torch._subclasses.fake_tensor as ft


def test_plain():
    assert ft.FakeTensorMode is not None


def test_needs_the_series():
    assert getattr(ft, "PATCHSET_TEST_OVERLAY", False)


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False
'''

REGRESSING_TEST = '''\
import torch._subclasses.fake_tensor as ft


def test_breaks_on_patched():
    assert not hasattr(ft, "PATCHSET_TEST_OVERLAY")
'''


def make_checkout(root: Path) -> Path:
    (root / "test").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\naddopts = -rEfX --tb=native\n")
    # The checkout root's torch/ sources must never be what the runs import.
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text("raise ImportError('checkout torch/ imported')\n")
    (root / "test" / "test_synth.py").write_text(CHECKOUT_TESTS)
    (root / "test" / "test_regress.py").write_text(REGRESSING_TEST)
    return root


@pytest.fixture
def installed_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A throwaway project whose .venv sees the system torch, this pytest, and the hook."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the throwaway venv borrows this interpreter's pytest; needs Python 3.11")
    # Plugins of the borrowed environment (e.g. pytest-benchmark) are not the project venv's.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    project = fixtures.make_project(tmp_path / "repo")
    # No series: `upstream-tests --checkout` would make the real overlay over the synthetic one
    # (test_pipeline_readme's edit recipe shows it making overlay and hook for the real series).
    project.series_file.unlink()
    fixtures.make_venv(project.venv, system_site_packages=True)
    purelib = sysconfig.get_paths()["purelib"]
    (fixtures.site_packages(project.venv) / "borrowed_pytest.pth").write_text(purelib + "\n")
    overlay_hook.install_project_venv(project, Runner(log_file=None, echo=False))
    return project


def test_end_to_end_fixed_by_series(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    before = fixtures.snapshot(checkout)
    system_before = fixtures.snapshot(fixtures.SYSTEM_SUBCLASSES)
    code = ut.run_upstream_tests(installed_project, Runner(log_file=None, echo=False), checkout,
                                 [ut.Selection("test/test_synth.py")], upstream=checkout)
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip().split(" ")[0] in ut.OUTCOMES}
    assert rows["passed"] == ["passed", "1", "|", "2"]
    assert rows["failed"] == ["failed", "1", "|", "0"]
    assert rows["skipped"] == ["skipped", "1", "|", "1"]
    assert rows["xfailed"] == ["xfailed", "1", "|", "1"]
    assert "patched regressions: 0" in out
    assert "fixed by the series: 1\n    test.test_synth::test_needs_the_series" in out
    assert f"checkout: {checkout}" in out and f"overlay:  {installed_project.overlay}" in out
    assert "the series' file: upstream's, unchanged" in out  # one tree: nothing more ran
    assert fixtures.snapshot(checkout) == before  # no .pyc, no cache, nothing
    assert fixtures.snapshot(fixtures.SYSTEM_SUBCLASSES) == system_before
    assert (installed_project.cache / "upstream-tests" / "test_synth-patched.log").is_file()


def test_end_to_end_regression_exits_non_zero(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    code = ut.run_upstream_tests(installed_project, Runner(log_file=None, echo=False), checkout,
                                 [ut.Selection("test/test_regress.py")], upstream=checkout)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "patched regressions: 1\n    test.test_regress::test_breaks_on_patched" in out


def test_patched_side_loading_the_system_file_is_an_error(
    tmp_path: Path, installed_project: Project
) -> None:
    # A hook that no longer maps fake_tensor: the "patched" run silently gets the system file.
    hook = fixtures.site_packages(installed_project.venv) / "patchset_overlay.py"
    hook.write_text(re.sub(r"^MODULES = .*$", "MODULES = ('torch._subclasses.meta_utils',)",
                           hook.read_text(), flags=re.M))
    checkout = make_checkout(tmp_path / "checkout")
    with pytest.raises(PatchsetError, match="patched run loaded torch._subclasses.fake_tensor from /usr/lib"):
        ut.run_upstream_tests(installed_project, Runner(log_file=None, echo=False), checkout,
                              [ut.Selection("test/test_synth.py")], upstream=checkout)


CHECKOUT_EDIT = b"\nPATCHSET_CHECKOUT_EDIT = True  # edited in the checkout after apply\n"
EDIT_TEST = '''\
import torch._subclasses.fake_tensor as ft


def test_sees_the_checkout_edit():
    assert getattr(ft, "PATCHSET_CHECKOUT_EDIT", False)


def test_sees_the_series():
    assert getattr(ft, "PATCHSET_TEST_OVERLAY", False)
'''


def patched_checkout(root: Path, project: Project) -> Path:
    """make_checkout plus the overlaid modules as `apply` leaves them (the overlay's bytes)."""
    checkout = make_checkout(root)
    (checkout / "test" / "test_edit.py").write_text(EDIT_TEST)
    for path in fixtures.OVERLAID:
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_bytes((project.overlay / path).read_bytes())
    return checkout


def table_rows(out: str) -> dict:
    return {line.split()[0]: line.split() for line in out.splitlines()
            if line.strip().split(" ")[0] in ut.OUTCOMES}


def upstream_tests_cli(project: Project, checkout: Path, *files: str) -> int:
    """`upstream-tests --checkout`, upstream's files from the project's cached checkout: here the
    checkout's own test files (copied once), so the series' file is upstream's, unchanged."""
    if not project.default_checkout.is_dir():
        shutil.copytree(checkout / "test", project.default_checkout / "test")
        shutil.copyfile(checkout / "pytest.ini", project.default_checkout / "pytest.ini")
    args = argparse.Namespace(checkout=str(checkout), files=list(files), keyword=None, python=None)
    return ut.cmd_upstream_tests(project, Runner(log_file=None, echo=False), args)


def test_checkout_edit_is_what_the_patched_side_tests(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    checkout = patched_checkout(tmp_path / "checkout", installed_project)
    fake = checkout / "torch/_subclasses/fake_tensor.py"
    assert upstream_tests_cli(installed_project, checkout, "test_edit.py") == 0  # not edited yet
    out = capsys.readouterr().out
    assert table_rows(out)["passed"] == ["passed", "0", "|", "1"] and "differing from" not in out
    fake.write_bytes(fake.read_bytes() + CHECKOUT_EDIT)  # what a packager does before refresh
    assert upstream_tests_cli(installed_project, checkout, "test_edit.py") == 0
    out = capsys.readouterr().out
    assert table_rows(out)["passed"] == ["passed", "0", "|", "2"]
    assert "fixed by the series: 2" in out
    assert "torch/_subclasses/fake_tensor.py" in out.split("differing from", 1)[1].splitlines()[0]
    # the overlay is untouched: it is the checkout's file that ran
    assert CHECKOUT_EDIT not in (installed_project.overlay / "torch/_subclasses/fake_tensor.py").read_bytes()


@pytest.mark.parametrize("state, error", [
    ("unpatched", "holds the unpatched 1.13.1 files; apply the series first"),
    ("missing", "has no torch/_subclasses/meta_utils.py, which the series makes; apply the series"),
])
def test_checkout_without_the_series_is_refused(tmp_path: Path, installed_project: Project,
                                                state: str, error: str) -> None:
    checkout = patched_checkout(tmp_path / "checkout", installed_project)
    for path in fixtures.OVERLAID:
        if state == "unpatched":
            (checkout / path).write_bytes((fixtures.SYSTEM_TORCH.parent / path).read_bytes())
    if state == "missing":
        (checkout / "torch/_subclasses/meta_utils.py").unlink()
    with pytest.raises(PatchsetError, match=error):
        upstream_tests_cli(installed_project, checkout, "test_edit.py")


# --- upstream's unmodified file on both sides, the series' file on the patched side ----------

UPSTREAM_SPLIT = '''\
import torch._subclasses.fake_tensor as ft


def test_upstream_plain():
    assert ft.FakeTensorMode is not None


def test_upstream_fixed():
    assert getattr(ft, "PATCHSET_TEST_OVERLAY", False)
'''
SERIES_ADDS = '''

def test_series_new():
    assert getattr(ft, "PATCHSET_TEST_OVERLAY", False)
'''
SERIES_BREAKS = '''

def test_series_breaks():
    assert not hasattr(ft, "PATCHSET_TEST_OVERLAY")
'''


def split_trees(tmp_path: Path, series_text: str, file: str = "test/test_split.py") -> Tuple[Path, Path]:
    """(upstream tree with UPSTREAM_SPLIT as test_split.py, checkout with `series_text` as `file`)."""
    upstream, checkout = make_checkout(tmp_path / "upstream"), make_checkout(tmp_path / "checkout")
    (upstream / "test" / "test_split.py").write_text(UPSTREAM_SPLIT)
    (checkout / file).write_text(series_text)
    return upstream, checkout


def run_split(project: Project, upstream: Path, checkout: Optional[Path],
              file: str = "test/test_split.py") -> int:
    return ut.run_upstream_tests(project, Runner(log_file=None, echo=False), checkout,
                                 [ut.Selection(file)], upstream=upstream)


def test_upstream_file_runs_on_both_sides_and_the_series_file_on_the_patched_side(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    upstream, checkout = split_trees(tmp_path, UPSTREAM_SPLIT + SERIES_ADDS)
    code = run_split(installed_project, upstream, checkout)
    out = capsys.readouterr().out
    assert code == 0, out
    # the table is upstream's two tests only: the series' new one is not counted in it
    assert table_counts(out, "test/test_split.py") == {
        "passed": (1, 2), "failed": (1, 0), "skipped": (0, 0), "xfailed": (0, 0), "xpassed": (0, 0)}
    assert "patched regressions: 0\n" in out
    assert "fixed by the series: 1\n    test.test_split::test_upstream_fixed\n" in out
    assert "the series' file, patched: 3 passed, 0 failed, 0 skipped, 0 xfailed" in out
    assert "the series' tests failing: 0\n" in out
    logs = installed_project.cache / "upstream-tests"
    listing = logs / "test_split-series-patched-only.txt"
    assert f"only in the series' file: 1  (listed in {listing})\n" in out
    assert listing.read_text() == "test.test_split::test_series_new\n"
    assert f"upstream: {upstream}" in out and f"checkout: {checkout}" in out
    assert sorted(p.name for p in logs.iterdir()) == [  # the series' file never ran unpatched
        "test_split-patched.log", "test_split-series-patched-only.txt", "test_split-series-patched.log",
        "test_split-unpatched.log"]


def test_a_failing_test_of_the_series_file_exits_non_zero(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    upstream, checkout = split_trees(tmp_path, UPSTREAM_SPLIT + SERIES_ADDS + SERIES_BREAKS)
    code = run_split(installed_project, upstream, checkout)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "patched regressions: 0\n" in out  # upstream's file is fine
    assert ("the series' tests failing: 1\n"
            "    test.test_split::test_series_breaks  (only in the series' file)\n") in out


def test_a_file_the_series_creates_runs_on_the_patched_side_only(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    # test/test_weak.py is `absent` in patches/base.sha256: v1.13.1 has none
    upstream, checkout = split_trees(tmp_path, UPSTREAM_SPLIT, file="test/test_weak.py")
    (upstream / "test" / "test_weak.py").write_text(REGRESSING_TEST)  # never run: not upstream's
    code = run_split(installed_project, upstream, checkout, file="test/test_weak.py")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "test/test_weak.py\n  v1.13.1 has no test/test_weak.py: the series' file only\n" in out
    assert "the series' file, patched: 2 passed, 0 failed, 0 skipped, 0 xfailed" in out
    assert "patched regressions" not in out and "only in the series' file: 2  (listed in" in out


def test_without_a_series_checkout_only_upstream_files_run(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    upstream, _ = split_trees(tmp_path, UPSTREAM_SPLIT + SERIES_ADDS)
    assert run_split(installed_project, upstream, None) == 0
    out = capsys.readouterr().out
    assert "checkout: none with the series applied" in out and "the series' file" not in out
    assert table_counts(out, "test/test_split.py")["passed"] == (1, 2)
    with pytest.raises(PatchsetError, match="v1.13.1 has none"):
        run_split(installed_project, upstream, None, file="test/test_weak.py")


def test_upstream_file_must_be_v1131s(tmp_path: Path, base_files: Dict[str, bytes]) -> None:
    project = fixtures.make_project(tmp_path / "repo")
    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    meta = ut.Selection("test/test_meta.py", ("-k", "TestMetaConverter"))
    (tree / meta.file).write_bytes(base_files[meta.file])
    assert ut.upstream_file(project, tree, meta) == tree / meta.file
    (tree / meta.file).write_bytes(base_files[meta.file] + b"# the series' tests\n")
    with pytest.raises(PatchsetError, match=r"test_meta.py is not v1.13.1's .*apply --reverse"):
        ut.upstream_file(project, tree, meta)
    (tree / "test" / "test_weak.py").write_text("")  # `absent` in the base: never upstream's
    assert ut.upstream_file(project, tree, ut.Selection("test/test_weak.py")) is None
    assert ut.upstream_file(project, tree, ut.Selection("test/test_only_here.py")) is None


def test_declared_changes_of_upstream_tests_are_listed_not_counted(
    tmp_path: Path, installed_project: Project, capsys: pytest.CaptureFixture
) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    (installed_project.patches / ut.CHANGES_FILE).write_text(
        json.dumps({"test.test_regress::test_breaks_on_patched": "changed on purpose by 0042"}))
    code = ut.run_upstream_tests(installed_project, Runner(log_file=None, echo=False), checkout,
                                 [ut.Selection("test/test_regress.py")], upstream=checkout)
    out = capsys.readouterr().out
    assert code == 0, out
    assert table_counts(out, "test/test_regress.py")["failed"] == (0, 1)  # still shown as failing
    assert "patched regressions: 0\n" in out
    assert ("failing patched as the series changes them on purpose (patches/upstream-test-changes.json): 1\n"
            "    test.test_regress::test_breaks_on_patched: changed on purpose by 0042\n") in out


def test_declared_changes_name_upstream_tests_the_series_changes(base_files: Dict[str, bytes]) -> None:
    from patchset_lib.common import find_project
    from patchset_lib.series import patched_result

    project = find_project(HERE.parent / "build_scripts")
    changes = ut.declared_changes(project)
    assert changes, "patches/upstream-test-changes.json is empty"
    result = patched_result(project, Runner(log_file=None, echo=False))
    for test_id, why in changes.items():
        module, name = test_id.split("::")
        path = "/".join(module.split(".")[:2]) + ".py"  # test.test_x.Class -> test/test_x.py
        upstream, ours = base_files[path].decode(), result[path].decode()
        assert f"    def {name}(self" in upstream, test_id  # upstream's test ...
        assert upstream.split(f"def {name}(", 1)[1].split("\n    def ", 1)[0] != \
            ours.split(f"def {name}(", 1)[1].split("\n    def ", 1)[0], test_id  # ... changed by the series
        assert re.match(r"\d{4} \(", why), why  # names the patch


def test_fresh_setup_is_told_to_make_the_overlay(tmp_path: Path) -> None:
    project = fixtures.make_project(tmp_path / "repo")
    fixtures.make_venv(project.venv, system_site_packages=True)
    shutil.rmtree(project.overlay / "torch")
    checkout = make_checkout(tmp_path / "checkout")
    with pytest.raises(PatchsetError, match=r"run ./build_scripts/patchset overlay first$"):
        ut.run_upstream_tests(project, Runner(log_file=None, echo=False), checkout,
                              [ut.Selection("test/test_synth.py")])


def test_missing_hook_asks_for_install(tmp_path: Path) -> None:
    project = fixtures.make_project(tmp_path / "repo")
    fixtures.make_venv(project.venv, system_site_packages=True)
    checkout = make_checkout(tmp_path / "checkout")
    with pytest.raises(PatchsetError, match="patchset install first"):
        ut.run_upstream_tests(project, Runner(log_file=None, echo=False), checkout,
                              [ut.Selection("test/test_synth.py")])


def test_missing_checkout_file_is_an_error(tmp_path: Path) -> None:
    project = fixtures.make_project(tmp_path / "repo")
    fixtures.make_venv(project.venv, system_site_packages=True)
    checkout = make_checkout(tmp_path / "checkout")
    with pytest.raises(PatchsetError, match="no test file .*test_fake_tensor.py"):
        ut.run_upstream_tests(project, Runner(log_file=None, echo=False), checkout)


# --- the series' own upstream tests, on the real project ----------------------------------------


def table_counts(out: str, label: str) -> dict:
    """{outcome: (unpatched, patched)} of the table printed under `label`."""
    lines = out.split(label + "\n", 1)[1].splitlines()
    counts = {}
    for line in lines[1:1 + len(ut.OUTCOMES)]:
        name, left, _, right = line.split()
        counts[name] = (int(left), int(right))
    return counts


def series_selection_counts(tmp_path: Path, selection: "ut.Selection", helper_dir: str = "") -> dict:
    """Run `selection` of its test file as the series leaves it (with `helper_dir`, upstream's
    modules the file imports, from the cached checkout) on both sides of the real project venv,
    with upstream-tests' own runs (upstream-tests runs the series' files patched only); returns
    {outcome: (unpatched, patched)} after checking no patched regression."""
    from patchset_lib.common import find_project
    from patchset_lib.series import patched_result

    project = find_project(HERE.parent / "build_scripts")
    runner = Runner(log_file=None, echo=False)
    checkout = tmp_path / "checkout"
    (checkout / "test").mkdir(parents=True)
    result = patched_result(project, runner)
    (checkout / selection.path).write_bytes(result[selection.path])
    if helper_dir:
        shutil.copytree(project.default_checkout / helper_dir, checkout / helper_dir)
    entries = ut.read_manifest(project)
    sides = ut.venv_sides(project, ut.checked_torch_dir(project, runner, project.venv_python, entries), entries)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / f"{ut.LOADCHECK_PLUGIN}.py").write_text(ut.LOADCHECK_SOURCE)
    runs = {side.name: ut.checked_run(project, runner, checkout, selection, side, workdir, "-both").outcomes
            for side in sides}
    assert ut.regressions(runs["unpatched"], runs["patched"]) == []
    counts = {name: ut.count_outcomes(outcomes) for name, outcomes in runs.items()}
    return {o: (counts["unpatched"][o], counts["patched"][o]) for o in ut.OUTCOMES}


def test_meta_kernel_tests_of_the_series_pass_patched_and_fail_unpatched(
        tmp_path: Path) -> None:
    selection = ut.Selection("test/test_meta.py", ("-k", "TestMetaKernelsMatchCPU"))
    counts = series_selection_counts(tmp_path, selection)
    assert counts["failed"][1] == 0 and counts["passed"][1] >= 100
    assert counts["failed"][0] > 0  # the kernels are what the series adds


def test_fx_generated_source_tests_of_the_series_pass_patched_and_fail_unpatched(
        tmp_path: Path) -> None:
    selection = ut.Selection("test/test_fx.py", ("-k", "TestGraphModuleGeneratedSource"))
    counts = series_selection_counts(tmp_path, selection, helper_dir="test/fx")
    assert counts["failed"][1] == 0 and counts["passed"][1] >= 5
    assert counts["failed"][0] > 0  # freeing the source is what the series adds
