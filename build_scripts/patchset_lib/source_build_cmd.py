"""`patchset source-build [--checkout DIR] [--smoke] [--dry-run] [--preflight]`: build torch from
Debian's +dfsg source tree with both series applied.

The checkout (default: the cached Debian tree) is copied into .cache/source-build/, where the
fake-tensor series and the build-fix series (patches/build-fixes/) are applied and two headers
from Debian's later packaging are placed (build_inputs); it is configured against Debian's system
libraries (USE_SYSTEM_LIBS=1, CPU only) with the venv `.venv-source-build` (no system
site-packages: Debian's torch must not shadow the build), then built with ninja, showing its
[N/M] progress with an ETA; a rerun resumes. The full build ends with `setup.py develop` and
upstream's tests against the built torch; `--smoke` compiles a fixed sample of translation units
of every part instead (what CI can afford). Output goes to the terminal and .cache/source-build.log.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .series import reset_cached_checkout
from .build_inputs import BUILD_APT_PACKAGES
from .build_tree import (BUILD_DIR, CPU_CAPABILITY_KERNEL, SMOKE_SAMPLE, SYSTEM_LIBS_ENV, prepare_tree,
                         run_ninja, tree_dir, unconfigured_targets)
from .common import PatchsetError, Project, Runner, add_command, base_pin
from .apt import install_apt_packages, missing_apt_packages

VENV_DIR = ".venv-source-build"
LOG_NAME = "source-build.log"
MIN_CMAKE = (3, 13)  # cmake_minimum_required of v1.13.1's CMakeLists.txt and setup_helpers
MIN_GCC = (7, 0)     # C++14; v1.13.1's CMakeLists.txt special-cases GCC < 7 with extra flags
MIN_DISK_GB = 30
SMOKE_DISK_GB = 5
TORCH_VERSION = "1.13.1"
MIN_RAM_GB = 8
RAM_GB_PER_JOB = 4   # a C++ compile of ATen peaks near 2-4 GB

# CPU only, and none of the optional libraries whose sources we do not need.
BUILD_ENV: Mapping[str, str] = {
    "USE_CUDA": "0",
    "BUILD_TEST": "0",
    "USE_DISTRIBUTED": "0",
    "USE_MKLDNN": "0",
    "USE_FBGEMM": "0",
    "USE_NNPACK": "0",
    "USE_QNNPACK": "0",
    "USE_XNNPACK": "0",
    "USE_KINETO": "0",
    "USE_ITT": "0",
}

# Build requirements of v1.13.1 (its requirements.txt), pinned where newer releases break it:
# numpy 2 changed the C ABI, setuptools 70+ dropped what `setup.py develop` of 2022 expects.
PIP_PACKAGES: Sequence[str] = (
    "numpy<2", "setuptools<70", "pyyaml", "typing_extensions", "astunparse", "cffi", "six",
    "requests", "sympy", "pytest==9.2.0", "expecttest==0.3.0",
)
UPSTREAM_TESTS: Sequence[Tuple[str, ...]] = (
    ("test_fake_tensor.py",),
    ("test_weak.py",),
    ("test_meta.py", "-k", "TestMetaConverter"),
    ("test_proxy_tensor.py", "-k", "not TestProxyTensorOpInfo"),
)


# ---- checks: each returns an error message or None ---------------------------------------------


def check_checkout_tree(checkout: Path) -> Optional[str]:
    missing = [name for name in ("setup.py", "CMakeLists.txt", "torch", "test")
               if not (checkout / name).exists()]
    if missing:
        return f"{checkout} is not a PyTorch source tree (no {', '.join(missing)})"
    return None


def parse_version(text: str) -> Optional[Tuple[int, ...]]:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def check_version(tool: str, text: str, minimum: Tuple[int, ...]) -> Optional[str]:
    version = parse_version(text)
    wanted = ".".join(map(str, minimum))
    if version is None:
        return f"cannot read the version of {tool} from {text.strip()[:80]!r}"
    if version < minimum:
        return f"{tool} {'.'.join(map(str, version))} is too old; v1.13.1 needs {wanted} or newer"
    return None


def check_tool(name: str, path_env: str, hint: str) -> Optional[str]:
    if shutil.which(name, path=path_env) is None:
        return f"{name} not found on PATH ({hint})"
    return None


def tool_version(runner: Runner, argv: Sequence[str]) -> str:
    proc = runner.run(argv, capture=True, check=False)
    return proc.stdout + proc.stderr


def check_compilers(runner: Runner, path_env: str) -> Optional[str]:
    for name in ("gcc", "g++"):
        error = check_tool(name, path_env, "apt-get install build-essential")
        if error:
            return error
    gxx = shutil.which("g++", path=path_env) or "g++"
    return check_version("g++", tool_version(runner, [gxx, "-dumpfullversion"]), MIN_GCC)


def check_cmake(runner: Runner, path_env: str) -> Optional[str]:
    error = check_tool("cmake", path_env, "apt-get install cmake")
    if error:
        return error
    cmake = shutil.which("cmake", path=path_env) or "cmake"
    return check_version("cmake", tool_version(runner, [cmake, "--version"]), MIN_CMAKE)


def check_disk_free(free_bytes: int, need_gb: int = MIN_DISK_GB) -> Optional[str]:
    if free_bytes < need_gb * 2**30:
        return f"{free_bytes / 2**30:.1f} GB free; a build tree needs about {need_gb} GB"
    return None


def mem_total_bytes(meminfo: str) -> int:
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def check_memory(total_bytes: int, need_gb: int = MIN_RAM_GB) -> Optional[str]:
    if total_bytes < need_gb * 2**30:
        return f"{total_bytes / 2**30:.1f} GB RAM; the build needs at least {need_gb} GB"
    return None


def check_python(python: Path) -> Optional[str]:
    if not python.is_file():
        return f"{python} not found (the build uses the Python the system torch is built for)"
    return None


def check_python_headers(include_dir: Path) -> Optional[str]:
    if not (include_dir / "Python.h").is_file():
        return f"no Python.h in {include_dir} (apt-get install python3-dev)"
    return None


def max_jobs(cores: int, total_bytes: int) -> int:
    return max(1, min(cores, total_bytes // (RAM_GB_PER_JOB * 2**30)))


# ---- the plan ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    title: str
    argv: Tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ninja: bool = False  # streamed with the ETA of ninja's [N/M] lines


@dataclasses.dataclass(frozen=True)
class Plan:
    checkout: Path
    tree: Path
    python: Path
    venv: Path
    log: Path
    env: Mapping[str, str]
    steps: Tuple[Step, ...]


def build_env(cores: int, total_bytes: int) -> Dict[str, str]:
    return {**BUILD_ENV, **SYSTEM_LIBS_ENV, "MAX_JOBS": str(max_jobs(cores, total_bytes)),
            "PYTORCH_BUILD_VERSION": TORCH_VERSION, "PYTORCH_BUILD_NUMBER": "0"}


def make_plan(project: Project, checkout: Path, cores: int, total_bytes: int, smoke: bool = False) -> Plan:
    python = Path(base_pin(project)["system_python"])
    venv = project.root / VENV_DIR
    vpy = str(venv / "bin" / "python")
    env = build_env(cores, total_bytes)
    tree = tree_dir(project)
    build = str(tree / BUILD_DIR)
    ninja = ("ninja", "-C", build, "-j", env["MAX_JOBS"])
    setup = [
        Step("create the venv", (str(python), "-m", "venv", str(venv)), project.root),
        Step("install build requirements", (vpy, "-m", "pip", "install", *PIP_PACKAGES), project.root),
        Step("configure (setup.py build --cmake-only)", (vpy, "setup.py", "build", "--cmake-only"), tree, env),
    ]
    if smoke:
        sample = tuple(target for _, target in SMOKE_SAMPLE)
        steps = (*setup, Step(f"compile the smoke sample ({len(sample)} translation units)",
                              (*ninja, *sample), tree, env, ninja=True))
    else:
        tests = tuple(
            Step(f"upstream tests: {' '.join(args)}", (vpy, "-m", "pytest", *args, "-q"), tree / "test")
            for args in UPSTREAM_TESTS
        )
        steps = (*setup, Step("build (ninja)", ninja, tree, env, ninja=True),
                 Step("install torch into the venv (setup.py develop)", (vpy, "setup.py", "develop"), tree, env),
                 *tests)
    return Plan(checkout=checkout, tree=tree, python=python, venv=venv, log=project.cache / LOG_NAME,
                env=env, steps=steps)


def plan_text(plan: Plan) -> str:
    lines = [
        f"checkout: {plan.checkout}",
        f"tree:     {plan.tree} (copy of the checkout + fake-tensor series + build fixes + fetched headers)",
        f"python:   {plan.python}",
        f"venv:     {plan.venv}",
        f"log:      {plan.log}",
        "build env: " + " ".join(f"{k}={v}" for k, v in plan.env.items()),
    ]
    for number, step in enumerate(plan.steps, 1):
        env = " ".join(f"{k}={v}" for k, v in step.env.items())
        command = (env + " " if env else "") + shlex.join(step.argv)
        lines.append(f"[{number}/{len(plan.steps)}] {step.title}\n    (cd {step.cwd} && {command})")
    return "\n".join(lines)


# ---- preflight ---------------------------------------------------------------------------------


def python_include_dir(runner: Runner, python: Path) -> Path:
    if not python.is_file():
        return Path("/nonexistent")
    proc = runner.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                      capture=True, check=False)
    return Path(proc.stdout.strip() or "/nonexistent")


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_apt(runner: Runner) -> Optional[str]:
    missing = missing_apt_packages(runner, BUILD_APT_PACKAGES)
    if missing:
        return f"missing Debian packages {' '.join(missing)} (source-build installs them; run it as root)"
    return None


def preflight_checks(project: Project, runner: Runner, checkout: Path, path_env: str,
                     total_bytes: int, disk_gb: int = MIN_DISK_GB) -> List[Tuple[str, Callable[[], Optional[str]]]]:
    python = Path(base_pin(project)["system_python"])
    return [
        ("checkout is a source tree", lambda: check_checkout_tree(checkout)),
        ("Debian build packages", lambda: check_apt(runner)),
        ("gcc/g++", lambda: check_compilers(runner, path_env)),
        ("cmake", lambda: check_cmake(runner, path_env)),
        ("ninja", lambda: check_tool("ninja", path_env, "apt-get install ninja-build")),
        ("python", lambda: check_python(python)),
        ("Python headers", lambda: check_python_headers(python_include_dir(runner, python))),
        ("disk space", lambda: check_disk_free(
            shutil.disk_usage(nearest_existing(project.cache)).free, disk_gb)),
        ("memory", lambda: check_memory(total_bytes)),
    ]


def run_preflight(checks: Sequence[Tuple[str, Callable[[], Optional[str]]]]) -> List[str]:
    """Print every check's result; return the failures."""
    failures = []
    for name, check in checks:
        error = check()
        print(f"  {'FAIL' if error else 'ok':<4}  {name}" + (f": {error}" if error else ""))
        if error:
            failures.append(f"{name}: {error}")
    return failures


# ---- running -----------------------------------------------------------------------------------


def unconfigured_kernels(build: Path, targets: Sequence[str]) -> List[str]:
    """The targets the configured tree lacks, all of them CPU-capability kernels this machine's
    configure left out; any other target it lacks means the sample no longer matches the tree."""
    absent = unconfigured_targets(build, targets) if targets else []
    stale = [t for t in absent if not CPU_CAPABILITY_KERNEL.search(t)]
    if stale:
        raise PatchsetError(f"the configured tree has no rule for {', '.join(stale)}; "
                            "the smoke sample no longer matches the tree")
    return absent


def run_step(runner: Runner, step: Step, log: Path) -> None:
    """Run one step with its output both on the terminal and appended to the log."""
    if step.ninja:
        build, targets = Path(step.argv[2]), step.argv[5:]
        absent = unconfigured_kernels(build, targets)
        targets = tuple(t for t in targets if t not in absent)
        result = run_ninja(runner, build, targets, int(step.argv[4]), log, sys.stdout, step.env)
        print(f"ninja finished in {result.seconds:.0f} s (exit {result.returncode})", flush=True)
        if result.returncode != 0:
            raise PatchsetError(f"{step.title} failed (exit {result.returncode}); see {log}")
        return
    with open(log, "a") as out:
        out.write(f"\n==== {step.title}: {shlex.join(step.argv)} (in {step.cwd})\n")
    shell = f"{shlex.join(step.argv)} 2>&1 | tee -a {shlex.quote(str(log))}"
    proc = runner.run(["bash", "-o", "pipefail", "-c", shell], cwd=step.cwd, env=dict(step.env),
                      check=False)
    if proc.returncode != 0:
        raise PatchsetError(f"{step.title} failed (exit {proc.returncode}); see {log}")


def steps_to_run(plan: Plan) -> Tuple[Step, ...]:
    """Resume: a venv that exists is not made again, a configured tree not configured again
    (ninja re-runs cmake itself when its inputs changed)."""
    steps = plan.steps
    if (plan.venv / "bin" / "python").is_file():
        steps = steps[1:]
    if (plan.tree / BUILD_DIR / "build.ninja").is_file():
        steps = tuple(s for s in steps if "--cmake-only" not in s.argv)
    return steps


def execute(plan: Plan, runner: Runner) -> None:
    plan.log.parent.mkdir(parents=True, exist_ok=True)
    steps = steps_to_run(plan)
    for number, step in enumerate(steps, 1):
        print(f"[{number}/{len(steps)}] {step.title} (log: {plan.log})", flush=True)
        run_step(runner, step, plan.log)


def read_meminfo() -> str:
    try:
        return Path("/proc/meminfo").read_text()
    except OSError:
        return ""


def smoke_report(plan: Plan, seconds: float, unconfigured: Sequence[str]) -> str:
    lines = [f"smoke sample compiled in {seconds:.0f} s (configure and code generation included):"]
    build = plan.tree / BUILD_DIR
    for group, target in SMOKE_SAMPLE:
        state = "skipped" if target in unconfigured else "ok" if (build / target).is_file() else "MISSING"
        reason = " (configure found no CPU support here)" if target in unconfigured else ""
        lines.append(f"  {state:<7}  {group:<28} {target.rsplit('.dir/', 1)[-1]}{reason}")
    return "\n".join(lines)


def cmd_source_build(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    checkout = Path(args.checkout).resolve() if args.checkout else project.default_checkout
    total = mem_total_bytes(read_meminfo())
    plan = make_plan(project, checkout, os.cpu_count() or 1, total, smoke=args.smoke)
    if args.dry_run:
        print(plan_text(plan))
        return 0
    if not args.preflight:
        missing = missing_apt_packages(runner, BUILD_APT_PACKAGES)
        if missing:
            install_apt_packages(runner, missing)
    print(f"preflight for {checkout}:")
    disk = SMOKE_DISK_GB if args.smoke else MIN_DISK_GB
    failures = run_preflight(preflight_checks(project, runner, checkout, os.environ.get("PATH", ""), total, disk))
    if failures:
        raise PatchsetError(f"preflight failed ({len(failures)} check(s)); nothing was built")
    if args.preflight:
        return 0
    if not args.checkout:
        # the tool's own cache, left patched by an older series: a user's is never reset
        reset = reset_cached_checkout(project, runner, checkout)
        if reset:
            print(f"source-build: {reset}", flush=True)
    started = time.monotonic()
    prepare_tree(project, runner, checkout)
    execute(plan, runner)
    if args.smoke:
        sample = [t for _, t in SMOKE_SAMPLE]
        unconfigured = unconfigured_kernels(plan.tree / BUILD_DIR, sample)
        print(smoke_report(plan, time.monotonic() - started, unconfigured))
        missing = [t for t in sample if t not in unconfigured and not (plan.tree / BUILD_DIR / t).is_file()]
        if missing:
            raise PatchsetError(f"ninja left {len(missing)} sample object(s) unbuilt")
        return 0
    print(f"source build and upstream tests passed; venv: {plan.venv}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "source-build", cmd_source_build,
        help="build torch (CPU only) from the checkout with both series, then run upstream's tests",
        description="Copy the checkout into .cache/source-build, apply the fake-tensor series and "
                    "patches/build-fixes, configure against Debian's libraries, build with ninja "
                    "(resumable, with an ETA), `setup.py develop` into .venv-source-build, then run "
                    "upstream's tests. Hours on 2 cores; --smoke compiles a fixed sample only.",
    )
    parser.add_argument("--checkout", metavar="DIR",
                        help="PyTorch 1.13.1 source tree, pristine or patched (default: the cache's)")
    parser.add_argument("--smoke", action="store_true",
                        help="configure and compile a fixed sample of translation units from each part")
    parser.add_argument("--dry-run", action="store_true", help="print the exact plan and exit")
    parser.add_argument("--preflight", action="store_true", help="only run the checks (exit 1 if any fails)")
