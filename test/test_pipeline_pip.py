"""The series on PyPI's torch==1.13.1 for real: `.venv-pip` made by `patchset setup --pip`.

The venv is made once per test session (first run ~3.3 GB through pip's cache; later runs only
check the pins). install --python replaces the overlaid files there; every test leaves the venv
uninstalled, as it found it. The interpreter search is also checked on fake pyenv roots.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from conftest import copy_tool, make_patched_checkout, run_tool  # noqa: E402
from patchset_lib import overlay, pip_torch, pyfind, setup_cmd, torch_target  # noqa: E402
from patchset_lib.common import (  # noqa: E402
    ABSENT, PatchsetError, Runner, file_digest, find_project, sha256_file,
)
from patchset_lib.venvs import venv_python, wrong_pins  # noqa: E402

PROJECT = find_project(REPO / "build_scripts")
PIP_PYTHON = venv_python(setup_cmd.pip_venv(PROJECT))


def tool(*args: str, env: Dict[str, str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "build_scripts" / "patchset"), "-q", *args],
                          cwd=REPO, capture_output=True, text=True, env=env)


def entries() -> List[overlay.ManifestEntry]:
    return overlay.read_manifest(PROJECT)


def site_packages() -> Path:
    info = torch_target.probe_python(Runner(echo=False), PIP_PYTHON)
    assert info.torch_dir is not None
    return info.torch_dir.parent


def snapshot() -> Dict[str, str]:
    """sha256 and mode of every file in the directories holding an overlaid module (the rest
    of the 3.3 GB wheel is never opened for writing), plus the project's backups."""
    site = site_packages()
    found: Dict[str, str] = {}
    for directory in sorted({(site / e.path).parent for e in entries()}) + [PROJECT.cache / "backups"]:
        for path in sorted(directory.glob("*")) if directory.is_dir() else []:
            if path.is_file():
                found[str(path)] = f"{sha256_file(path)} {oct(path.stat().st_mode)}"
    return found


@pytest.fixture(scope="session")
def pip_python() -> Path:
    """`.venv-pip`, made (or checked) by the tool once per session, with nothing installed."""
    setup_cmd.ensure_pip_venv(PROJECT, Runner(log_file=PROJECT.log_file, echo=False), os.environ)
    proc = tool("uninstall", "--python", str(PIP_PYTHON))  # a run killed midway may have left it
    assert proc.returncode == 0, proc.stderr
    return PIP_PYTHON


# Module scope: set up at the first test that asks for it, so the tests above it see the venv
# uninstalled; torn down (uninstalled and checked) after the last test of the module.
@pytest.fixture(scope="module")
def installed(pip_python: Path) -> Iterator[Path]:
    before = snapshot()
    proc = tool("install", "--python", str(pip_python))
    assert proc.returncode == 0, proc.stderr
    yield pip_python
    proc = tool("uninstall", "--python", str(pip_python))
    assert proc.returncode == 0, proc.stderr
    assert snapshot() == before


def test_pip_venv_has_the_pins_and_the_pinned_base_files(pip_python: Path) -> None:
    assert wrong_pins(Runner(echo=False), pip_python, setup_cmd.PIP_TORCH_PINS) == []
    assert wrong_pins(Runner(echo=False), pip_python, setup_cmd.PIP_DYNAMO_PINS) == []
    site = site_packages()
    assert site.is_relative_to(PROJECT.root / ".venv-pip")
    for entry in entries():
        assert file_digest(site / entry.path) == entry.base_sha256, entry.path


def test_install_twice_then_uninstall_restores_every_byte(pip_python: Path) -> None:
    before = snapshot()
    first = tool("install", "--python", str(pip_python))
    assert first.returncode == 0, first.stderr
    installed = snapshot()
    backups = pip_torch.backup_dir(PROJECT, site_packages())
    for entry in entries():
        assert sha256_file(site_packages() / entry.path) == entry.result_sha256, entry.path
        assert file_digest(backups / "files" / entry.path) == entry.base_sha256, entry.path
    second = tool("install", "--python", str(pip_python))
    assert second.returncode == 0 and "already installed" in second.stdout
    assert snapshot() == installed
    proc = tool("uninstall", "--python", str(pip_python))
    assert proc.returncode == 0, proc.stderr
    assert snapshot() == before
    assert not backups.exists()


def test_uninstall_removes_the_files_the_series_creates(pip_python: Path) -> None:
    created = [e for e in entries() if e.base_sha256 == ABSENT]
    assert created, "the series creates torch/utils/weak.py"
    proc = tool("install", "--python", str(pip_python))
    assert proc.returncode == 0, proc.stderr
    assert all((site_packages() / e.path).is_file() for e in created)
    proc = tool("uninstall", "--python", str(pip_python))
    assert proc.returncode == 0, proc.stderr
    assert not any((site_packages() / e.path).exists() for e in created)


def test_install_refuses_a_file_the_base_lacks_and_changes_nothing(pip_python: Path) -> None:
    target = site_packages() / next(e.path for e in entries() if e.base_sha256 == ABSENT)
    try:
        target.write_bytes(b"# not from the series\n")
        before = snapshot()
        proc = tool("install", "--python", str(pip_python))
        assert proc.returncode == 1
        assert f"{target} exists, but the 1.13.1 base has none" in proc.stderr
        assert snapshot() == before
    finally:
        target.unlink()


def test_install_refuses_a_changed_base_file_and_changes_nothing(pip_python: Path) -> None:
    target = site_packages() / [e.path for e in entries() if e.base_sha256 != ABSENT][-1]
    original = target.read_bytes()
    try:
        target.write_bytes(original + b"# changed by the test\n")
        before = snapshot()
        proc = tool("install", "--python", str(pip_python))
        assert proc.returncode == 1
        assert f"{target} differs from the 1.13.1 base" in proc.stderr
        assert snapshot() == before
    finally:
        target.write_bytes(original)


def test_upstream_tests_refuse_pip_torch_that_is_not_installed(pip_python: Path) -> None:
    proc = tool("upstream-tests", "--python", str(pip_python))
    assert proc.returncode == 1
    assert "does not match the overlay" in proc.stderr and "install --python" in proc.stderr


def test_installed_pip_torch_loads_the_patched_bytes(installed: Path) -> None:
    files = torch_target.module_files(Runner(echo=False), installed, [e.module for e in entries()],
                                     overlay_on=False)
    for entry in entries():
        assert files[entry.module] == str(site_packages() / entry.path)
        assert sha256_file(Path(files[entry.module])) == entry.result_sha256


def summary_counts(output: str) -> Dict[str, int]:
    last = [line for line in output.splitlines() if line.strip()][-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|error|errors)", last)}


def test_our_behaviour_tests_pass_on_installed_pip_torch(installed: Path) -> None:
    collected = subprocess.run([str(installed), "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                                str(REPO / "test" / "test_fake_tensor.py")],
                               cwd="/", capture_output=True, text=True)
    count = len([line for line in collected.stdout.splitlines() if "::" in line])
    proc = subprocess.run([str(installed), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(REPO / "test" / "test_fake_tensor.py")],
                          cwd="/", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert count > 50
    counts = summary_counts(proc.stdout)  # upstream's tests there skip a few (CUDA, ...)
    assert set(counts) == {"passed"} and count - 20 < counts["passed"] <= count


@pytest.fixture(scope="module")
def patched_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream's test/ with the pristine base files, patched by `apply`: the patched
    test_fake_tensor.py holds upstream's tests and ours (the cached checkout may be pristine)."""
    return make_patched_checkout(tmp_path_factory.mktemp("checkout"))


def test_upstream_tests_pass_on_installed_pip_torch(installed: Path, patched_checkout: Path) -> None:
    proc = tool("upstream-tests", "--python", str(installed), "--checkout", str(patched_checkout))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "patched by install --python" in proc.stdout
    table = proc.stdout.split("test/test_fake_tensor.py\n", 1)[1]  # upstream's file, unmodified
    passed = re.search(r"^  passed\s+(\d+) \| (\d+)", table, re.M)
    series = re.search(r"the series' file, patched: (\d+) passed, (\d+) failed", table)
    assert passed and series
    assert int(passed.group(2)) > 20
    assert int(series.group(1)) > 100 and int(series.group(2)) == 0  # upstream's and ours
    assert "patched regressions: 0" in proc.stdout  # (0004's two declared changes aside)
    assert "the series' tests failing: 0" in proc.stdout


def test_crossref_runs_both_sides_on_installed_pip_torch(installed: Path) -> None:
    proc = tool("crossref", "--python", str(installed), "--ops", "kthvalue,take", "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    unpatched = re.search(r"^silent mismatches, unpatched: (\d+)$", proc.stdout, re.M)
    patched = re.search(r"^silent mismatches, patched: (\d+)$", proc.stdout, re.M)
    assert unpatched and patched
    assert int(unpatched.group(1)) > 0  # the unpatched workers really loaded the pristine files
    assert int(patched.group(1)) == 0


# --- finding the interpreter ----------------------------------------------------------------

def test_setup_pip_without_a_python_names_where_it_looked(tmp_path: Path) -> None:
    root = tmp_path / "project"
    copy_tool(root)
    (root / "patches").mkdir()
    empty_bin, empty_pyenv = tmp_path / "bin", tmp_path / "pyenv"
    empty_bin.mkdir()
    empty_pyenv.mkdir()
    env = {**os.environ, "PATH": str(empty_bin), "PYENV_ROOT": str(empty_pyenv)}
    proc = subprocess.run([sys.executable, str(root / "build_scripts" / "patchset"), "-q", "setup", "--pip"],
                          cwd=root, capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert "needs Python 3.10, 3.9, 3.8, 3.7" in proc.stderr
    assert f"{empty_pyenv / 'versions'}/<3.10, 3.9, 3.8, 3.7>.*/bin/python" in proc.stderr
    assert "on PATH" in proc.stderr and "candidates tried: none found" in proc.stderr
    assert sorted(p.name for p in root.iterdir()) == ["build_scripts", "patches"]


def link_python(directory: Path, name: str, target: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(target)


def test_find_python_prefers_pyenv_then_path_in_the_wanted_order(tmp_path: Path) -> None:
    real = Path(sys.executable).resolve()  # a real 3.11 stands in for each pyenv version
    runner = Runner(echo=False)
    major, minor = sys.version_info[:2]
    wanted = ((major, minor), (3, 0))
    link_python(tmp_path / "pyenv/versions/3.0.1/bin", "python", real)
    assert pyfind.pyenv_candidates(tmp_path / "pyenv", wanted) == [
        (tmp_path / "pyenv/versions/3.0.1/bin/python", (3, 0))]
    # 3.0.1's interpreter is really a 3.11: the probe rejects it, so PATH's python3.11 wins.
    link_python(tmp_path / "bin", f"python{major}.{minor}", real)
    env = {"PATH": str(tmp_path / "bin"), "PYENV_ROOT": str(tmp_path / "pyenv")}
    assert pyfind.find_python(runner, wanted, env, "x") == tmp_path / "bin" / f"python{major}.{minor}"
    link_python(tmp_path / f"pyenv/versions/{major}.{minor}.9/bin", "python", real)
    assert pyfind.find_python(runner, wanted, env, "x") == \
        tmp_path / f"pyenv/versions/{major}.{minor}.9/bin/python"
    with pytest.raises(PatchsetError, match="candidates tried: .*3.0.1/bin/python"):
        pyfind.find_python(runner, ((3, 0),), env, "x")


def test_setup_help_offers_pip() -> None:
    proc = run_tool(REPO, "setup", "--help")
    assert proc.returncode == 0 and "--pip" in proc.stdout
