"""Upstream's fake tests of the ops whose Meta kernels the series changes, on a patched checkout.

`patchset upstream-tests --files test/test_ops.py -k ...` in the project .venv: upstream's fake
tests of those ops in its unmodified test_ops.py against the patched and the unpatched torch,
then the series' test_ops.py, whose skip and expected-failure lists the series updates, against
the patched torch. The series' own TestMetaKernelsMatchCPU runs in test_pipeline_upstream_tests.py.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from conftest import make_patched_checkout  # noqa: E402
from patchset_lib import upstream_tests_cmd  # noqa: E402
from patchset_lib.common import find_project  # noqa: E402

PROJECT = find_project(REPO / "build_scripts")
KEYWORD = upstream_tests_cmd.FAKE_OPS_KEYWORD


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "build_scripts" / "patchset"), "-q", *args],
                          cwd=REPO, capture_output=True, text=True)


@pytest.fixture(scope="module")
def patched_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream's test/ with the pristine base files, patched by `apply`."""
    return make_patched_checkout(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="module")
def run(patched_checkout: Path) -> subprocess.CompletedProcess:
    return tool("upstream-tests", "--checkout", str(patched_checkout),
                "--files", "test/test_ops.py", "-k", KEYWORD)


def counts(stdout: str, label: str) -> dict:
    table = stdout.split(label + "\n", 1)[1]
    return {outcome: tuple(int(n) for n in re.search(rf"^  {outcome}\s+(\d+) \| (\d+)", table, re.M).groups())
            for outcome in ("passed", "failed")}


def test_patched_fake_tests_of_the_changed_kernels_pass_with_no_regression(
        run: subprocess.CompletedProcess) -> None:
    assert run.returncode == 0, run.stdout + run.stderr
    assert "patched regressions: 0" in run.stdout
    ops = counts(run.stdout, f"test/test_ops.py -k '{KEYWORD}'")
    assert ops["failed"][1] == 0 and ops["passed"][1] > 0
    assert "the series' tests failing: 0" in run.stdout


def test_the_series_file_runs_the_fake_tests_upstream_skips(run: subprocess.CompletedProcess) -> None:
    ops = counts(run.stdout, f"test/test_ops.py -k '{KEYWORD}'")
    assert ops["failed"] == (0, 0)  # upstream's skips and lists spare 1.13.1's wrong fakes
    series = re.search(r"the series' file, patched: (\d+) passed, (\d+) failed", run.stdout)
    assert series, run.stdout
    # aminmax no longer skipped (nor pixel_shuffle/unshuffle spared the aliasing check): all pass
    assert (int(series[1]), int(series[2])) == (ops["passed"][1] + 2, 0)
