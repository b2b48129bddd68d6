"""`patchset source-build`: preflight checks on fake inputs, the dry-run plan, the CLI exits.

No build runs here (it takes hours); the checks get fake trees, fake PATHs with fake tools,
and fake numbers.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from patchset_lib import source_build_cmd as sb  # noqa: E402
from patchset_lib.common import PatchsetError, Project, Runner  # noqa: E402

GB = 2**30
PRISTINE = {
    "torch/_subclasses/meta_utils.py": b"def meta():\n    return 1\n",
    "torch/_subclasses/fake_tensor.py": b"def fake():\n    return 2\n",
    "test/test_fake_tensor.py": b"import unittest\n",
}
DEBIAN_EMPTY_DIRS = ("pybind11", "fmt", "sleef", "cpuinfo", "pthreadpool", "onnx", "foxi")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_project(root: Path) -> Project:
    (root / "patches").mkdir(parents=True)
    shutil.copytree(REPO / "build_scripts", root / "build_scripts",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "patches/base.json").write_text(json.dumps({
        "upstream_tag": "v1.13.1", "tree_dir": "pytorch-1.13.1", "system_python": "/usr/bin/python3.11"}))
    (root / "patches/base.sha256").write_text("".join(f"{sha(d)}  {p}\n" for p, d in PRISTINE.items()))
    (root / "patches/identity.json").write_text(json.dumps(
        {"name": "n", "email": "e@example.invalid", "date": "2026-12-02T00:00:00+00:00"}))
    return Project(root)


def write(root: Path, files: Mapping[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def debian_tree(root: Path, patched: bool = True) -> Path:
    """Like Debian's +dfsg orig tree: sources, but empty vendored third_party directories."""
    files = dict(PRISTINE)
    if patched:
        files["torch/_subclasses/meta_utils.py"] = b"def meta():\n    return 10\n"
    write(root, {**files, "setup.py": b"", "CMakeLists.txt": b""})
    for name in DEBIAN_EMPTY_DIRS:
        (root / "third_party" / name).mkdir(parents=True)
    return root


def full_tree(root: Path) -> Path:
    debian_tree(root)
    write(root, {marker: b"" for marker in sb.THIRD_PARTY_MARKERS})
    return root


def fake_tool(bin_dir: Path, name: str, output: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\necho '{output}'\n")
    tool.chmod(0o755)


@pytest.fixture
def runner() -> Runner:
    return Runner(echo=False)


# ---- checks on fake inputs ---------------------------------------------------------------------


def test_debian_tree_lacks_third_party_clearly(tmp_path: Path) -> None:
    error = sb.check_third_party(debian_tree(tmp_path / "pytorch-1.13.1"))
    assert error is not None
    assert f"{len(sb.THIRD_PARTY_MARKERS)} of {len(sb.THIRD_PARTY_MARKERS)} missing" in error
    assert "third_party/pybind11/include/pybind11/pybind11.h" in error
    assert "+dfsg" in error
    assert "git clone of pytorch/pytorch at tag v1.13.1" in error
    assert "git submodule update --init --recursive" in error
    assert "://" not in error and "github" not in error.lower()


def test_full_tree_passes_and_one_missing_marker_is_named(tmp_path: Path) -> None:
    tree = full_tree(tmp_path / "src")
    assert sb.check_third_party(tree) is None
    assert sb.check_checkout_tree(tree) is None
    (tree / "third_party/sleef/CMakeLists.txt").unlink()
    error = sb.check_third_party(tree)
    assert error is not None and "1 of" in error and "third_party/sleef/CMakeLists.txt" in error


def test_checkout_tree_and_patched_checks(tmp_path: Path) -> None:
    assert "not a PyTorch source tree" in (sb.check_checkout_tree(tmp_path / "nothing") or "")
    hashes = {p: sha(d) for p, d in PRISTINE.items()}
    pristine = debian_tree(tmp_path / "pristine", patched=False)
    assert "not patched" in (sb.check_patched(pristine, hashes) or "")
    assert sb.check_patched(debian_tree(tmp_path / "patched"), hashes) is None


def test_missing_cmake_on_path(runner: Runner, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    error = sb.check_cmake(runner, str(empty))
    assert error is not None and "cmake not found" in error


@pytest.mark.parametrize("version, ok", [("cmake version 3.10.2", False), ("cmake version 3.13.0", True),
                                         ("cmake version 3.25.1", True)])
def test_cmake_version(runner: Runner, tmp_path: Path, version: str, ok: bool) -> None:
    fake_tool(tmp_path / "bin", "cmake", version)
    error = sb.check_cmake(runner, str(tmp_path / "bin"))
    assert (error is None) == ok, error
    if not ok:
        assert "3.10.2 is too old" in error and "3.13" in error


@pytest.mark.parametrize("version, ok", [("5.4.0", False), ("7.5.0", True), ("12.2.0", True)])
def test_compiler_version(runner: Runner, tmp_path: Path, version: str, ok: bool) -> None:
    fake_tool(tmp_path / "bin", "gcc", version)
    fake_tool(tmp_path / "bin", "g++", version)
    error = sb.check_compilers(runner, str(tmp_path / "bin"))
    assert (error is None) == ok, error


def test_compiler_missing_gxx(runner: Runner, tmp_path: Path) -> None:
    fake_tool(tmp_path / "bin", "gcc", "12.2.0")
    assert "g++ not found" in (sb.check_compilers(runner, str(tmp_path / "bin")) or "")


def test_ninja_on_path(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    assert "ninja not found" in (sb.check_tool("ninja", str(tmp_path / "bin"), "hint") or "")
    fake_tool(tmp_path / "bin", "ninja", "1.11.1")
    assert sb.check_tool("ninja", str(tmp_path / "bin"), "hint") is None


def test_disk_memory_and_jobs() -> None:
    assert sb.check_disk_free(29 * GB) is not None
    assert sb.check_disk_free(30 * GB) is None
    meminfo = "MemTotal:       24563236 kB\nMemFree:        1000 kB\n"
    total = sb.mem_total_bytes(meminfo)
    assert total == 24563236 * 1024
    assert sb.check_memory(total) is None
    assert "needs at least 8 GB" in (sb.check_memory(4 * GB) or "")
    assert sb.mem_total_bytes("garbage") == 0
    assert sb.max_jobs(2, total) == 2
    assert sb.max_jobs(16, 24 * GB) == 6
    assert sb.max_jobs(8, 2 * GB) == 1


def test_python_headers(tmp_path: Path) -> None:
    assert "python3-dev" in (sb.check_python_headers(tmp_path) or "")
    (tmp_path / "Python.h").write_text("")
    assert sb.check_python_headers(tmp_path) is None
    assert sb.check_python(tmp_path / "python3.11") is not None


def test_run_preflight_reports_every_check(capsys: pytest.CaptureFixture) -> None:
    checks = [("a", lambda: None), ("b", lambda: "broken"), ("c", lambda: None), ("d", lambda: "bad")]
    assert sb.run_preflight(checks) == ["b: broken", "d: bad"]
    out = capsys.readouterr().out.splitlines()
    assert out == ["  ok    a", "  FAIL  b: broken", "  ok    c", "  FAIL  d: bad"]


# ---- plan and CLI ------------------------------------------------------------------------------


def test_plan_is_exact(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    checkout = tmp_path / "src"
    plan = sb.make_plan(project, checkout, cores=2, total_bytes=24 * GB)
    assert plan.env == {**sb.BUILD_ENV, "MAX_JOBS": "2"}
    for key in ("USE_CUDA", "BUILD_TEST", "USE_DISTRIBUTED", "USE_MKLDNN", "USE_FBGEMM", "USE_NNPACK",
                "USE_QNNPACK", "USE_XNNPACK"):
        assert plan.env[key] == "0"
    venv_python = str(project.root / ".venv-source-build/bin/python")
    assert [s.argv for s in plan.steps] == [
        ("/usr/bin/python3.11", "-m", "venv", str(project.root / ".venv-source-build")),
        (venv_python, "-m", "pip", "install", *sb.PIP_PACKAGES),
        (venv_python, "setup.py", "develop"),
        (venv_python, "-m", "pytest", "test_fake_tensor.py", "-q"),
        (venv_python, "-m", "pytest", "test_meta.py", "-k", "TestMetaConverter", "-q"),
        (venv_python, "-m", "pytest", "test_proxy_tensor.py", "-k", "not TestProxyTensorOpInfo", "-q"),
    ]
    assert [s.cwd for s in plan.steps] == [project.root, project.root, checkout,
                                           checkout / "test", checkout / "test", checkout / "test"]
    assert plan.steps[2].env == plan.env and not plan.steps[3].env
    assert plan.log == project.root / ".cache/source-build.log"


def run_cli(project: Project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(project.root / "build_scripts/patchset"), "-q", *args],
                          capture_output=True, text=True, env={**os.environ, "PATH": os.environ["PATH"]})


def test_dry_run_prints_plan_and_creates_nothing(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    checkout = debian_tree(tmp_path / "src")
    before = sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in str(p))
    proc = run_cli(project, "source-build", "--dry-run", "--checkout", str(checkout))
    assert proc.returncode == 0, proc.stderr
    jobs = sb.max_jobs(os.cpu_count() or 1, sb.mem_total_bytes(Path("/proc/meminfo").read_text()))
    env = " ".join(f"{k}={v}" for k, v in sb.BUILD_ENV.items()) + f" MAX_JOBS={jobs}"
    assert f"build env: {env}\n" in proc.stdout
    assert f"(cd {checkout} && {env} {project.root}/.venv-source-build/bin/python setup.py develop)" in proc.stdout
    assert f"log:      {project.root}/.cache/source-build.log" in proc.stdout
    assert f"(cd {checkout}/test && " in proc.stdout
    assert proc.stdout.count("\n[") == 6
    after = sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in str(p))
    assert after == before


def test_preflight_on_debian_tree_fails_naming_third_party(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    checkout = debian_tree(tmp_path / "pytorch-1.13.1")
    proc = run_cli(project, "source-build", "--preflight", "--checkout", str(checkout))
    assert proc.returncode == 1
    assert "FAIL  vendored third_party sources:" in proc.stdout
    assert "git submodule update --init --recursive" in proc.stdout
    assert "  ok    checkout is a source tree" in proc.stdout
    assert "  ok    checkout is patched" in proc.stdout
    for name in ("gcc/g++", "cmake", "ninja", "python", "Python headers", "disk space", "memory"):
        assert f"  {name}" in proc.stdout.replace("ok    ", "").replace("FAIL  ", "")
    assert "preflight failed" in proc.stderr and "nothing was built" in proc.stderr
    assert not (project.root / ".venv-source-build").exists()


def test_build_refuses_when_preflight_fails(tmp_path: Path, runner: Runner) -> None:
    project = make_project(tmp_path / "proj")
    checkout = debian_tree(tmp_path / "src")
    args = argparse.Namespace(checkout=str(checkout), dry_run=False, preflight=False)
    with pytest.raises(PatchsetError, match="preflight failed"):
        sb.cmd_source_build(project, runner, args)
    assert not (project.root / ".venv-source-build").exists()
    assert not (project.root / ".cache/source-build.log").exists()
