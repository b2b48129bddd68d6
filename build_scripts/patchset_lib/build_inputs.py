"""What a build of Debian's +dfsg tree needs beyond the tree: Debian build dependencies (apt),
the build-fix series (patches/build-fixes/), and two headers no bookworm package ships, taken
from Debian's own packaging of a later pytorch (patches/build-fixes/fetch.json).

Nothing fetched is committed. The later packaging comes through a private apt state whose
`deb-src` entries are derived from the machine's apt sources (as `setup` derives them) with
the release suite replaced, so the system's apt configuration is never touched.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .common import PatchsetError, Project, Runner
from .source import (
    SYSTEM_SOURCE_LIST,
    SYSTEM_SOURCE_PARTS,
    check_tarball,
    derive_deb_src,
    private_apt,
)

BUILD_FIXES_DIR = "build-fixes"
FETCH_FILE = "fetch.json"

# Debian bookworm packages for a CPU build against system libraries (USE_SYSTEM_LIBS=1);
# the first name of each group is the one installed.
BUILD_APT_PACKAGES: Sequence[Sequence[str]] = (
    ("g++",), ("cmake",), ("ninja-build",), ("python3-dev",), ("python3.11-venv", "python3-venv"),
    ("libfmt-dev",), ("pybind11-dev",), ("libsleef-dev",), ("libprotobuf-dev",),
    ("protobuf-compiler",), ("libonnx-dev",), ("libcpuinfo-dev",), ("libpthreadpool-dev",),
    ("libfp16-dev",), ("libfxdiv-dev",), ("libpsimd-dev",), ("libeigen3-dev",), ("libblas-dev",),
    ("libbenchmark-dev",), ("libgoogle-glog-dev",), ("libgflags-dev",),
)


def build_fixes_dir(project: Project) -> Path:
    return project.patches / BUILD_FIXES_DIR


def build_fix_series(project: Project) -> List[Path]:
    directory = build_fixes_dir(project)
    names = [line.strip() for line in (directory / "series").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    missing = [n for n in names if not (directory / n).is_file()]
    if missing:
        raise PatchsetError(f"build-fix patches listed in {directory / 'series'} are missing: {', '.join(missing)}")
    return [directory / n for n in names]


def fetch_pin(project: Project) -> Dict:
    return json.loads((build_fixes_dir(project) / FETCH_FILE).read_text())


def inputs_dir(project: Project) -> Path:
    return project.cache / "build-inputs"


# --- the later Debian packaging --------------------------------------------------------------

def retarget_suites(stanzas: Sequence[str], lines: Sequence[str], suite: str) -> Tuple[List[str], List[str]]:
    """The derived deb-src entries of the machine's release suite (not -updates/-security),
    pointed at `suite` instead."""
    out_stanzas: List[str] = []
    for stanza in stanzas:
        rows = stanza.splitlines()
        suites = [r for r in rows if r.lower().startswith("suites:")]
        if suites and any("-" not in s for s in suites[0].split(":", 1)[1].split()):
            out_stanzas.append("\n".join(f"Suites: {suite}" if r in suites else r for r in rows) + "\n")
    out_lines: List[str] = []
    for line in lines:
        words = line.split()
        # deb-src [options] URI suite components...
        at = 1
        if words[1].startswith("["):
            while not words[at].endswith("]"):
                at += 1
            at += 1
        if len(words) > at + 1 and "-" not in words[at + 1]:
            out_lines.append(" ".join(words[:at + 1] + [suite] + words[at + 2:]))
    return out_stanzas, out_lines


def check_debian_tarball(path: Path, sha256: str) -> Optional[str]:
    return check_tarball(path, sha256, f"patches/{BUILD_FIXES_DIR}/{FETCH_FILE}")


def ensure_debian_tarball(project: Project, runner: Runner) -> Path:
    """The pinned debian.tar.xz, fetched once through the private apt state and verified."""
    pin = fetch_pin(project)
    target = inputs_dir(project) / pin["debian_tarball"]
    if check_debian_tarball(target, pin["sha256"]) is None:
        return target
    state = inputs_dir(project) / "apt"
    stanzas, lines = retarget_suites(*derive_deb_src(SYSTEM_SOURCE_LIST, SYSTEM_SOURCE_PARTS), pin["suite"])
    opts = private_apt(runner, state, stanzas, lines)
    target.unlink(missing_ok=True)
    spec = f"{pin['debian_source_package']}={pin['debian_source_version']}"
    runner.run(["apt-get", *opts, "source", "--download-only", "--diff-only", spec], cwd=inputs_dir(project))
    error = check_debian_tarball(target, pin["sha256"])
    if error:
        raise PatchsetError(f"fetching the packaging of {spec} failed: {error}")
    return target


def place_fetched_files(project: Project, runner: Runner, tree: Path) -> List[str]:
    """Extract the pinned members of the later packaging into the tree; returns what was placed."""
    tarball = ensure_debian_tarball(project, runner)
    placed: List[str] = []
    with tarfile.open(tarball) as archive:
        for member, dest in fetch_pin(project)["files"].items():
            data = archive.extractfile(member)
            if data is None:
                raise PatchsetError(f"{tarball.name} has no file {member}")
            (tree / dest).parent.mkdir(parents=True, exist_ok=True)
            (tree / dest).write_bytes(data.read())
            placed.append(dest)
    return placed
