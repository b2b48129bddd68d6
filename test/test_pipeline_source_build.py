"""`patchset source-build`: preflight checks on fake inputs, the dry-run plan, the build-fix
series, the ninja progress, and `--smoke` for real.

The full build takes hours and is not run here; the checks get fake PATHs with fake tools and
fake numbers. `source-build --smoke` runs for real: it configures the Debian tree with both
series and compiles its sample of translation units (about ten minutes on 2 cores).
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Optional

import pytest
from conftest import META, TmpProject

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_scripts"))

from patchset_lib import build_inputs  # noqa: E402
from patchset_lib import build_tree as bt  # noqa: E402
from patchset_lib import source_build_cmd as sb  # noqa: E402
from patchset_lib.series import touched_paths  # noqa: E402
from patchset_lib.common import Project, Runner, find_project, read_base_hashes  # noqa: E402

REAL = find_project(REPO / "build_scripts")


def lint_touched(patches):
    return touched_paths(Runner(echo=False), patches)


@pytest.fixture(scope="module")
def base_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pristine files the build fixes touch, from the verified orig tarball."""
    from patchset_lib.source import ensure_tarball  # noqa: E402
    tarball = ensure_tarball(REAL, Runner(log_file=REAL.log_file, echo=False))
    out = tmp_path_factory.mktemp("pristine")
    paths = ["cmake/Dependencies.cmake", "torch/csrc/Exceptions.cpp", "torch/_jit_internal.py"]
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(out), "--strip-components=1",
                    *[f"pytorch-1.13.1/{p}" for p in paths]], check=True)
    return out

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


def fake_tool(bin_dir: Path, name: str, output: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\necho '{output}'\n")
    tool.chmod(0o755)


@pytest.fixture
def runner() -> Runner:
    return Runner(echo=False)


# ---- checks on fake inputs ---------------------------------------------------------------------


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


def run_cli(project: Project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(project.root / "build_scripts/patchset"), "-q", *args],
                          capture_output=True, text=True, env={**os.environ, "PATH": os.environ["PATH"]})




def test_plan_is_exact(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    checkout = tmp_path / "src"
    plan = sb.make_plan(project, checkout, cores=2, total_bytes=24 * GB)
    assert plan.env == {**sb.BUILD_ENV, **sb.SYSTEM_LIBS_ENV, "MAX_JOBS": "2",
                        "PYTORCH_BUILD_VERSION": "1.13.1", "PYTORCH_BUILD_NUMBER": "0"}
    for key in ("USE_CUDA", "BUILD_TEST", "USE_DISTRIBUTED", "USE_MKLDNN", "USE_FBGEMM", "USE_NNPACK",
                "USE_QNNPACK", "USE_XNNPACK", "USE_GLOO", "USE_TENSORPIPE", "USE_MPI"):
        assert plan.env[key] == "0"
    assert plan.env["USE_SYSTEM_LIBS"] == "1" and plan.env["BLAS"] == "Generic"
    venv_python = str(project.root / ".venv-source-build/bin/python")
    tree = project.root / ".cache/source-build/pytorch-1.13.1"
    ninja = ("ninja", "-C", str(tree / "build"), "-j", "2")
    assert plan.tree == tree
    assert [s.argv for s in plan.steps] == [
        ("/usr/bin/python3.11", "-m", "venv", str(project.root / ".venv-source-build")),
        (venv_python, "-m", "pip", "install", *sb.PIP_PACKAGES),
        (venv_python, "setup.py", "build", "--cmake-only"),
        ninja,
        (venv_python, "setup.py", "develop"),
        (venv_python, "-m", "pytest", "test_fake_tensor.py", "-q"),
        (venv_python, "-m", "pytest", "test_weak.py", "-q"),
        (venv_python, "-m", "pytest", "test_meta.py", "-k", "TestMetaConverter", "-q"),
        (venv_python, "-m", "pytest", "test_proxy_tensor.py", "-k", "not TestProxyTensorOpInfo", "-q"),
    ]
    assert [s.cwd for s in plan.steps] == [project.root, project.root, tree, tree, tree,
                                           tree / "test", tree / "test", tree / "test", tree / "test"]
    assert [s.ninja for s in plan.steps] == [False, False, False, True, False, False, False, False, False]
    assert all(s.env == plan.env for s in plan.steps[2:5]) and not plan.steps[5].env
    assert plan.log == project.root / ".cache/source-build.log"
    smoke = sb.make_plan(project, checkout, cores=2, total_bytes=24 * GB, smoke=True)
    assert [s.argv for s in smoke.steps][:3] == [s.argv for s in plan.steps][:3]
    assert smoke.steps[3].argv == (*ninja, *[t for _, t in sb.SMOKE_SAMPLE]) and len(smoke.steps) == 4


def test_smoke_sample_covers_every_part_of_libtorch() -> None:
    groups = {group.split(",")[0].split(" (")[0] for group, _ in sb.SMOKE_SAMPLE}
    assert groups == {"c10", "ATen core", "ATen native", "ATen native kernel", "generated registrations",
                      "torch/csrc", "torch_python"}
    isas = {target.split(".cpp.", 1)[1] for _, target in sb.SMOKE_SAMPLE if ".cpp.AVX" in target
            or ".cpp.DEFAULT" in target}
    assert isas == {"DEFAULT.cpp.o", "AVX2.cpp.o", "AVX512.cpp.o"}
    assert any(t.endswith("torch_python.dir/csrc/Exceptions.cpp.o") for _, t in sb.SMOKE_SAMPLE)


def test_resume_skips_the_venv_and_the_configure_step(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    plan = sb.make_plan(project, tmp_path / "src", cores=2, total_bytes=24 * GB)
    assert sb.steps_to_run(plan) == plan.steps
    (plan.venv / "bin").mkdir(parents=True)
    (plan.venv / "bin/python").write_text("")
    (plan.tree / "build").mkdir(parents=True)
    (plan.tree / "build/build.ninja").write_text("")
    assert [s.title for s in sb.steps_to_run(plan)] == [s.title for s in plan.steps[1:] if "--cmake-only" not in s.argv]


def test_dry_run_prints_plan_and_creates_nothing(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    checkout = debian_tree(tmp_path / "src")
    before = sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in str(p))
    proc = run_cli(project, "source-build", "--dry-run", "--checkout", str(checkout))
    assert proc.returncode == 0, proc.stderr
    jobs = sb.max_jobs(os.cpu_count() or 1, sb.mem_total_bytes(Path("/proc/meminfo").read_text()))
    env = " ".join(f"{k}={v}" for k, v in sb.build_env(os.cpu_count() or 1,
                                                         sb.mem_total_bytes(Path("/proc/meminfo").read_text())).items())
    tree = project.root / ".cache/source-build/pytorch-1.13.1"
    assert f"build env: {env}\n" in proc.stdout and f"MAX_JOBS={jobs}" in env
    assert f"(cd {tree} && {env} {project.root}/.venv-source-build/bin/python setup.py develop)" in proc.stdout
    assert f"(cd {tree} && {env} ninja -C {tree}/build -j {jobs})" in proc.stdout
    assert f"log:      {project.root}/.cache/source-build.log" in proc.stdout
    assert f"(cd {tree}/test && " in proc.stdout
    assert proc.stdout.count("\n[") == 9
    after = sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in str(p))
    assert after == before


def test_preflight_only_checks_and_names_each_check(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    proc = run_cli(project, "source-build", "--preflight", "--checkout", str(tmp_path / "nothing"))
    assert proc.returncode == 1
    assert "FAIL  checkout is a source tree:" in proc.stdout
    for name in ("Debian build packages", "gcc/g++", "cmake", "ninja", "python", "Python headers",
                 "disk space", "memory"):
        assert f"  {name}" in proc.stdout.replace("ok    ", "").replace("FAIL  ", "")
    assert "preflight failed" in proc.stderr and "nothing was built" in proc.stderr
    assert not (project.root / ".venv-source-build").exists()
    assert not (project.root / ".cache/source-build").exists()


# ---- build inputs ------------------------------------------------------------------------------


def test_retarget_suites_keeps_only_the_release_suite() -> None:
    stanzas = ["Types: deb-src\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
               "Components: main\n",
               "Types: deb-src\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\n"
               "Components: main\n"]
    lines = ["deb-src http://mirror.invalid/debian bookworm main contrib",
             "deb-src [signed-by=/k.gpg arch=amd64] http://mirror.invalid/debian bookworm main",
             "deb-src http://mirror.invalid/debian bookworm-updates main"]
    out_stanzas, out_lines = build_inputs.retarget_suites(stanzas, lines, "trixie")
    assert out_stanzas == ["Types: deb-src\nURIs: http://mirror.invalid/debian\nSuites: trixie\n"
                           "Components: main\n"]
    assert out_lines == ["deb-src http://mirror.invalid/debian trixie main contrib",
                         "deb-src [signed-by=/k.gpg arch=amd64] http://mirror.invalid/debian trixie main"]


def test_build_fix_series_applies_to_the_pristine_tree_and_says_why(base_checkout: Path) -> None:
    fixes = build_inputs.build_fix_series(REAL)
    assert len(fixes) == 5
    for patch in fixes:
        message = patch.read_text().split("\n\n", 1)[1]
        assert message.startswith("Why: "), patch.name
        assert "not part of the fake-tensor series" in " ".join(message.split()), patch.name
        proc = subprocess.run(["git", "apply", "--check", str(patch)], cwd=base_checkout,
                              capture_output=True, text=True)
        assert proc.returncode == 0, (patch.name, proc.stderr)
    touched = set(lint_touched(fixes))
    assert not touched & set(read_base_hashes(REAL)), "build fixes must not touch the series' files"


def test_python_311_build_fix_gives_the_debian_binarys_jit_internal(tmp_path: Path, base_checkout: Path) -> None:
    installed = Path("/usr/lib/python3/dist-packages/torch/_jit_internal.py")
    work = tmp_path / "t"
    (work / "torch").mkdir(parents=True)
    shutil.copyfile(base_checkout / "torch/_jit_internal.py", work / "torch/_jit_internal.py")
    assert sha(installed.read_bytes()) != sha((work / "torch/_jit_internal.py").read_bytes())
    patch = next(p for p in build_inputs.build_fix_series(REAL) if "+++ b/torch/_jit_internal.py" in p.read_text())
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True, env={**os.environ,
                   "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert sha((work / "torch/_jit_internal.py").read_bytes()) == sha(installed.read_bytes())


def test_fetch_pin_names_two_headers_and_no_host() -> None:
    pin = build_inputs.fetch_pin(REAL)
    assert pin["suite"] == "trixie" and len(pin["sha256"]) == 64
    assert sorted(pin["files"].values()) == ["third_party/kineto/libkineto/include/ActivityType.h",
                                             "third_party/pocketfft/pocketfft_hdronly.h"]
    assert "://" not in (REAL.patches / "build-fixes/fetch.json").read_text()


# ---- ninja progress ----------------------------------------------------------------------------


def test_eta_from_the_rate_so_far() -> None:
    assert bt.eta_text(0, 100, 5.0) == "ETA ?"
    assert bt.eta_text(10, 100, 60.0) == "ETA 9m00s"
    assert bt.eta_text(1, 1253, 17.0) == "ETA 5h54m"
    assert bt.eta_text(100, 100, 60.0) == "ETA 0m"


def test_stream_ninja_adds_the_eta_to_progress_lines() -> None:
    class FakeProc:
        stdout = io.StringIO("[1/4] Building CXX object a.o\nwarning: x\n[2/4] Building CXX object b.o\n")

    log, out = io.StringIO(), io.StringIO()
    bt.stream_ninja(FakeProc(), log, out, time.monotonic() - 10)  # type: ignore[arg-type]
    assert log.getvalue() == FakeProc.stdout.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/4] Building CXX object a.o  (ETA 0m3")
    assert lines[1] == "warning: x"
    assert lines[2].startswith("[2/4] Building CXX object b.o  (ETA 0m1")


# ---- CPU-capability kernels -------------------------------------------------------------------

_KERNEL = "caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/FillKernel.cpp."


def write_ninja_file(build: Path, outputs) -> Path:
    build.mkdir(parents=True)
    rules = "".join(f"build {out}: touch\n" for out in outputs)
    (build / "build.ninja").write_text(f"rule touch\n  command = touch $out\n{rules}")
    return build


def test_unconfigured_kernels_are_the_capabilities_configure_left_out(tmp_path: Path) -> None:
    build = write_ninja_file(tmp_path / "build", [_KERNEL + "DEFAULT.cpp.o", _KERNEL + "AVX2.cpp.o"])
    sample = [_KERNEL + "DEFAULT.cpp.o", _KERNEL + "AVX512.cpp.o", _KERNEL + "AVX2.cpp.o"]
    assert sb.unconfigured_kernels(build, sample) == [_KERNEL + "AVX512.cpp.o"]
    assert sb.unconfigured_kernels(build, []) == []


def test_a_sample_target_other_than_a_kernel_missing_from_the_tree_is_an_error(tmp_path: Path) -> None:
    build = write_ninja_file(tmp_path / "build", [_KERNEL + "DEFAULT.cpp.o"])
    with pytest.raises(sb.PatchsetError, match="no rule for c10/gone.cpp.o; the smoke sample no longer"):
        sb.unconfigured_kernels(build, [_KERNEL + "DEFAULT.cpp.o", "c10/gone.cpp.o"])


def test_ninja_step_builds_only_the_configured_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = write_ninja_file(tmp_path / "build", [_KERNEL + "DEFAULT.cpp.o"])
    built: list = []
    monkeypatch.setattr(sb, "run_ninja", lambda runner, build, targets, *rest: built.append(targets)
                        or bt.NinjaResult(0.0, 0))
    step = sb.Step("smoke", ("ninja", "-C", str(build), "-j", "2", _KERNEL + "DEFAULT.cpp.o",
                             _KERNEL + "AVX512.cpp.o"), tmp_path, ninja=True)
    sb.run_step(Runner(echo=False), step, tmp_path / "log")
    assert built == [(_KERNEL + "DEFAULT.cpp.o",)]


# ---- the smoke build, for real -----------------------------------------------------------------


def test_smoke_build_configures_and_compiles_its_sample() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "build_scripts/patchset"), "-q", "source-build", "--smoke"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    report = proc.stdout.split("smoke sample compiled in", 1)[1]
    build = bt.tree_dir(REAL) / "build"
    sample = [target for _, target in sb.SMOKE_SAMPLE]
    unconfigured = bt.unconfigured_targets(build, sample)
    assert all(bt.CPU_CAPABILITY_KERNEL.search(t) for t in unconfigured)
    assert report.count("\n  ok ") == len(sample) - len(unconfigured)
    assert report.count("\n  skipped ") == len(unconfigured)
    assert "MISSING" not in report
    for target in sample:
        if target not in unconfigured:
            assert (build / target).stat().st_size > 0, target


def _source_build_without_building(project: Project, monkeypatch: pytest.MonkeyPatch,
                                   checkout: Optional[Path]) -> list:
    """cmd_source_build with its checks passing and nothing built; returns the trees it prepared."""
    prepared: list = []
    monkeypatch.setattr(sb, "missing_apt_packages", lambda runner, packages: [])
    monkeypatch.setattr(sb, "run_preflight", lambda checks: [])
    monkeypatch.setattr(sb, "prepare_tree", lambda project, runner, tree: prepared.append(tree))
    monkeypatch.setattr(sb, "execute", lambda plan, runner: None)
    args = argparse.Namespace(checkout=None if checkout is None else str(checkout),
                              smoke=False, dry_run=False, preflight=False)
    assert sb.cmd_source_build(project, Runner(log_file=project.log_file), args) == 0
    return prepared


def test_source_build_resets_its_own_checkout_left_by_an_older_series(
    tmp_project: TmpProject, good_series: Mapping[str, bytes], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    project = Project(tmp_project.root)
    tmp_project.write_tree(project.default_checkout)
    (project.default_checkout / META).write_bytes(b"# an older series\n")

    prepared = _source_build_without_building(project, monkeypatch, None)

    assert prepared == [project.default_checkout]
    assert (project.default_checkout / META).read_bytes() == tmp_project.base[META]
    assert "reset base files" in capsys.readouterr().out


def test_source_build_never_resets_a_users_checkout(
    tmp_project: TmpProject, good_series: Mapping[str, bytes], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    project = Project(tmp_project.root)
    tmp_project.write_tree(project.default_checkout)
    (project.default_checkout / META).write_bytes(b"# an older series\n")
    users = tmp_project.write_tree(tmp_path / "users-checkout")
    (users / META).write_bytes(b"# the user's own edit\n")

    prepared = _source_build_without_building(project, monkeypatch, users)

    assert prepared == [users.resolve()]
    assert (users / META).read_bytes() == b"# the user's own edit\n"
    assert (project.default_checkout / META).read_bytes() == b"# an older series\n"
