"""The build tree of `source-build`: a copy of the checkout with the fake-tensor series and the
build-fix series applied and the fetched headers in place, configured against Debian's system
libraries, then built with ninja (a fixed sample for --smoke, everything otherwise).

The tree lives in .cache/source-build/ and is kept: a second run with the same checkout and
series resumes (ninja rebuilds only what is missing); any change of either series starts over.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from .series import apply_series, git_apply, load_series
from .build_inputs import build_fix_series, place_fetched_files
from .common import Project, Runner, base_pin, sha256_file

STAMP = ".patchset-tree.json"
BUILD_DIR = "build"

# On top of source-build's CPU-only flags: Debian's libraries instead of the vendored ones the
# +dfsg tree lacks, and off what needs sources no bookworm package has.
SYSTEM_LIBS_ENV: Mapping[str, str] = {
    "USE_SYSTEM_LIBS": "1",
    "BUILD_CUSTOM_PROTOBUF": "0",
    "BLAS": "Generic",
    # Dependencies.cmake's Generic branch reads this; unset it looks for a library of no name.
    "GENERIC_BLAS_LIBRARIES": "blas",
    "USE_PYTORCH_QNNPACK": "0",
    "USE_GLOO": "0",
    "USE_TENSORPIPE": "0",
    "USE_MPI": "0",
}

# --smoke compiles these object files (ninja target names relative to build/), a fixed sample of
# small translation units from each part of libtorch; ninja also runs the code generation they
# depend on. Chosen for being small: the sample is what CI can afford on 2 cores.
_CPU = "caffe2/CMakeFiles/torch_cpu.dir/__/"
_PYTHON = "caffe2/torch/CMakeFiles/torch_python.dir/"
SMOKE_SAMPLE: Sequence[Tuple[str, str]] = (
    ("c10", "c10/CMakeFiles/c10.dir/core/Device.cpp.o"),
    ("c10", "c10/CMakeFiles/c10.dir/util/StringUtil.cpp.o"),
    ("ATen core", _CPU + "aten/src/ATen/core/Range.cpp.o"),
    ("ATen native", _CPU + "aten/src/ATen/native/Fill.cpp.o"),
    ("ATen native kernel, DEFAULT", _CPU + "aten/src/ATen/native/cpu/FillKernel.cpp.DEFAULT.cpp.o"),
    ("ATen native kernel, AVX2", _CPU + "aten/src/ATen/native/cpu/FillKernel.cpp.AVX2.cpp.o"),
    ("ATen native kernel, AVX512", _CPU + "aten/src/ATen/native/cpu/FillKernel.cpp.AVX512.cpp.o"),
    ("generated registrations", _CPU + "aten/src/ATen/RegisterZeroTensor.cpp.o"),
    ("generated registrations", _CPU + "aten/src/ATen/RegisterBackendSelect.cpp.o"),
    ("torch/csrc (torch_cpu)", _CPU + "torch/csrc/autograd/anomaly_mode.cpp.o"),
    ("torch/csrc (torch_cpu)", _CPU + "torch/csrc/jit/frontend/source_range.cpp.o"),
    ("torch_python", _PYTHON + "csrc/Exceptions.cpp.o"),  # the fmt 9 build fix
    ("torch_python", _PYTHON + "csrc/Device.cpp.o"),
)


def tree_dir(project: Project) -> Path:
    return project.cache / "source-build" / base_pin(project)["tree_dir"]


def series_fingerprint(project: Project, checkout: Path) -> Dict[str, object]:
    """What the tree was made from: a change means the tree must be made again."""
    return {
        "checkout": str(checkout),
        "series": {p.name: sha256_file(p) for p in load_series(project)},
        "build_fixes": {p.name: sha256_file(p) for p in build_fix_series(project)},
    }


def read_stamp(tree: Path) -> Optional[Dict[str, object]]:
    try:
        return json.loads((tree / STAMP).read_text())
    except (OSError, ValueError):
        return None


def prepare_tree(project: Project, runner: Runner, checkout: Path) -> Path:
    """Copy the checkout, apply both series and place the fetched headers; reused when current."""
    tree = tree_dir(project)
    wanted = series_fingerprint(project, checkout)
    if read_stamp(tree) == wanted:
        print(f"source-build: reusing the tree {tree} (both series applied)", flush=True)
        return tree
    if tree.exists():
        print(f"source-build: {tree} was made from another checkout or series; making it again", flush=True)
        shutil.rmtree(tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    print(f"source-build: copying {checkout} to {tree}", flush=True)
    shutil.copytree(checkout, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", BUILD_DIR))
    print(f"source-build: {apply_series(project, runner, tree)}", flush=True)
    for patch in build_fix_series(project):
        git_apply(runner, patch, tree)
    print(f"source-build: applied {len(build_fix_series(project))} build fixes", flush=True)
    for dest in place_fetched_files(project, runner, tree):
        print(f"source-build: placed {dest}", flush=True)
    (tree / STAMP).write_text(json.dumps(wanted, indent=2) + "\n")
    return tree


# --- ninja -------------------------------------------------------------------------------

PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def eta_text(done: int, total: int, elapsed: float) -> str:
    """`ETA 1h02m` from the rate so far (`ETA ?` before the first step finished)."""
    if done <= 0 or total <= done:
        return "ETA ?" if total > done else "ETA 0m"
    left = elapsed / done * (total - done)
    hours, minutes = divmod(int(left // 60), 60)
    return f"ETA {hours}h{minutes:02d}m" if hours else f"ETA {minutes}m{int(left % 60):02d}s"


def stream_ninja(proc: subprocess.Popen, log: TextIO, out: TextIO, started: float) -> None:
    """Copy ninja's output to the log, and its `[N/M]` lines with an ETA to `out`."""
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        match = PROGRESS.match(line)
        if match:
            done, total = int(match.group(1)), int(match.group(2))
            elapsed = time.monotonic() - started
            line = f"{line.rstrip()[:150]}  ({eta_text(done, total, elapsed)})\n"
        out.write(line)
        out.flush()


@dataclasses.dataclass(frozen=True)
class NinjaResult:
    seconds: float
    returncode: int


def run_ninja(runner: Runner, build: Path, targets: Sequence[str], jobs: int, log_path: Path,
              out: TextIO, env: Mapping[str, str]) -> NinjaResult:
    """ninja with `env` (it re-runs cmake itself when a CMakeLists.txt changed)."""
    argv = ["ninja", "-C", str(build), "-j", str(jobs), *targets]
    runner.log_only(argv)  # logged like every command; run below to stream it with the ETA
    started = time.monotonic()
    with open(log_path, "a") as log:
        log.write(f"\n==== {' '.join(argv)}\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **env})
        stream_ninja(proc, log, out, started)
        code = proc.wait()
    return NinjaResult(time.monotonic() - started, code)


# A CPU capability's kernels exist only where configure ran a test program using it
# (cmake/Modules/FindAVX.cmake), so the sample's AVX2 and AVX512 objects depend on the machine.
CPU_CAPABILITY_KERNEL = re.compile(r"\.cpp\.AVX(2|512)\.cpp\.o$")


def unconfigured_targets(build: Path, targets: Sequence[str]) -> List[str]:
    """The targets the configured tree has no build rule for."""
    proc = subprocess.run(["ninja", "-C", str(build), "-t", "targets", "all"],
                          capture_output=True, text=True, check=True)
    known = set(re.findall(r"^(.+): \S+$", proc.stdout, re.M))
    return [t for t in targets if t not in known]
