"""`patchset lint`: upstream's pinned flake8 on the patched files of the series.

The real lint runs here and must find nothing; its flake8 (from `.venv-lint`, made by the tool)
is also shown to report a finding and to honour the checkout's `.flake8`. Before flake8, lint
checks patches/upstream-status.json: one entry per patch subject, known keys and values only.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from conftest import run_tool, series_copy  # noqa: E402
from patchset_lib import lint_cmd, upstream_status  # noqa: E402
from patchset_lib.common import PatchsetError, Runner, find_project  # noqa: E402

PROJECT = find_project(REPO / "build_scripts")
CHECKOUT = PROJECT.default_checkout


@pytest.fixture(scope="module")
def flake8_python() -> Path:
    return lint_cmd.ensure_lint_venv(PROJECT, Runner(log_file=PROJECT.log_file, echo=False), CHECKOUT)


def test_series_is_clean_under_upstreams_flake8(flake8_python: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "build_scripts" / "patchset"), "-q", "lint"],
                          cwd=REPO, capture_output=True, text=True)
    files = lint_cmd.lint_files(
        lint_cmd.touched_paths(Runner(echo=False), lint_cmd.load_series(PROJECT)))
    assert "test/test_fake_tensor.py" in files and len(files) >= 3
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"lint: 0 finding(s) in {len(files)} file(s)" in proc.stdout


def test_lint_venv_has_the_pins_of_lintrunner_toml(flake8_python: Path) -> None:
    pins = lint_cmd.flake8_pins((CHECKOUT / ".lintrunner.toml").read_text())
    assert pins["flake8"] == "3.8.2"
    assert {"flake8-bugbear", "flake8-comprehensions", "pyflakes", "pycodestyle"} <= set(pins)
    version = subprocess.run([str(flake8_python), "-m", "flake8", "--version"],
                             capture_output=True, text=True).stdout
    assert version.startswith("3.8.2 ")
    assert "flake8-bugbear: 20.1.4" in version and "pyflakes: 2.2.0" in version


def test_flake8_reports_redefinition_and_honours_the_checkout_config(
    flake8_python: Path, tmp_path: Path
) -> None:
    files = {
        "test/redefined.py": b"from os import path\nfrom os import path, sep\n\nprint(path, sep)\n",
        # E501 is ignored by upstream's .flake8 (B950 at 120 * 1.1 instead).
        "torch/long_line.py": b"x = '" + b"a" * 118 + b"'\n",
    }
    lint_cmd.write_tree(tmp_path, (CHECKOUT / ".flake8").read_bytes(), files)
    findings = lint_cmd.run_flake8(Runner(echo=False), flake8_python, tmp_path, sorted(files))
    assert findings == ["test/redefined.py:2:1: F811 redefinition of unused 'path' from line 1"]


def test_flake8_pins_refuses_a_toml_without_flake8() -> None:
    with pytest.raises(PatchsetError, match="no FLAKE8 linter"):
        lint_cmd.flake8_pins("[[linter]]\ncode = 'MYPY'\n")
    with pytest.raises(PatchsetError, match="pins no flake8"):
        lint_cmd.flake8_pins("[[linter]]\ncode = 'FLAKE8'\ninit_command = ['x', 'mccabe==0.6.1']\n")


def test_lint_refuses_a_checkout_without_config(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "build_scripts" / "patchset"), "-q", "lint",
                           "--checkout", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "has no .lintrunner.toml or .flake8" in proc.stderr


# ---- patches/upstream-status.json ----------------------------------------------------------------

def test_the_series_has_a_valid_upstream_status_entry_per_patch() -> None:
    subjects = upstream_status.series_subjects(PROJECT)
    assert len(subjects) == len(lint_cmd.load_series(PROJECT))
    assert upstream_status.status_problems(upstream_status.read_status(PROJECT), subjects) == []


GOOD = {"forwarded": "no", "why": "Not yet sent.", "later_torch": "still open"}


@pytest.mark.parametrize("status, problem", [
    ({"A": GOOD}, "no entry for 'B'"),
    ({"A": GOOD, "B": GOOD, "C": GOOD}, "entry 'C' names no patch of patches/series"),
    ({"A": GOOD, "B": {**GOOD, "upstream": "x"}}, "'B': unknown key 'upstream'"),
    ({"A": GOOD, "B": {**GOOD, "forwarded": "yes"}}, "'B': forwarded is 'yes', not one of no, not-needed"),
    ({"A": GOOD, "B": {"forwarded": "no", "why": "x"}}, "'B': missing 'later_torch'"),
    ({"A": GOOD, "B": {**GOOD, "bug": "https://github.com/pytorch/pytorch/issues/1"}},
     "'B': bug must be a list of https:// URLs"),
    ({"A": GOOD, "B": {**GOOD, "follows": "PR 80544"}}, "'B': follows must be one https:// URL"),
    ({"A": GOOD, "B": {**GOOD, "why": ""}}, "'B': why must be one non-empty line"),
])
def test_upstream_status_problems_are_named(status: dict, problem: str) -> None:
    assert problem in upstream_status.status_problems(status, ["A", "B"])


def test_lint_fails_on_a_patch_without_an_entry(tmp_path: Path) -> None:
    project = series_copy(tmp_path / "project")
    status_path = project / "patches" / "upstream-status.json"
    status = json.loads(status_path.read_text())
    subject = next(iter(status))
    del status[subject]
    status["Not a patch"] = {"forwarded": "no", "why": "x", "later_torch": "y", "bugs": []}
    status_path.write_text(json.dumps(status))
    proc = run_tool(project, "lint")
    assert proc.returncode == 1
    assert f"no entry for {subject!r}" in proc.stderr
    assert "entry 'Not a patch' names no patch of patches/series" in proc.stderr
    assert "'Not a patch': unknown key 'bugs'" in proc.stderr
    assert "flake8" not in proc.stdout  # refused before anything else ran
