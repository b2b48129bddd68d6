"""Fixtures of the pipeline tests: a throw-away copy of the project with a synthetic series.

`TmpProject`: the real base files come from the tool's cache (fetched through the tool if
missing, never skipped); patches are made with real git (`git format-patch`) in a temporary
repo seeded with those files, so these tests do not depend on the contents of the real series.
`make_small_project`: a few tiny stand-in base files instead, for the series tools (export,
refresh), whose series is committed the tool's own way (`series_io`).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL_LIB = REPO / "build_scripts"
if str(TOOL_LIB) not in sys.path:
    sys.path.insert(0, str(TOOL_LIB))

from patchset_lib import series_io  # noqa: E402
from patchset_lib.common import ABSENT, Project, Runner, find_project, read_base_hashes  # noqa: E402
from patchset_lib.generated_tests import GENERATED_TESTS  # noqa: E402
from patchset_lib.series import copy_pristine_tree  # noqa: E402
from patchset_lib.series_tests import patch_paths  # noqa: E402,F401 (the tests' import of it)
from patchset_lib.source import ensure_pristine  # noqa: E402

Edit = Callable[[str], str]
SEED_ENV = {
    "GIT_AUTHOR_NAME": "Seed", "GIT_AUTHOR_EMAIL": "seed@example.invalid",
    "GIT_COMMITTER_NAME": "Seed", "GIT_COMMITTER_EMAIL": "seed@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(*args: str, cwd: Path, env: Optional[Mapping[str, str]] = None) -> str:
    full_env = {**os.environ, **SEED_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_hashes(root: Path, skip: str = ".git") -> Dict[str, str]:
    """sha256 of every file under root (outside directories named skip), by relative path."""
    return {
        str(p.relative_to(root)): sha(p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and skip not in p.relative_to(root).parts
    }


def insert_line(after: int, text: str) -> Edit:
    """An edit that inserts a comment line after line `after` (1-based)."""
    def edit(content: str) -> str:
        lines = content.splitlines(keepends=True)
        return "".join(lines[:after] + [text + "\n"] + lines[after:])
    return edit


def copy_tool(root: Path) -> None:
    """build_scripts/ into root, so `root/build_scripts/patchset` runs on the project at root."""
    shutil.copytree(TOOL_LIB, root / "build_scripts", ignore=shutil.ignore_patterns("__pycache__"))


def run_tool(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`patchset -q ARGS` with the CLI copied into root (see copy_tool), on the project at root."""
    return subprocess.run([sys.executable, str(root / "build_scripts" / "patchset"), "-q", *args],
                          cwd=root, capture_output=True, text=True)


@pytest.fixture(scope="module")
def bench() -> Iterator[Any]:
    """test/bench_memo.py, imported as a module (pytest does not collect it)."""
    spec = importlib.util.spec_from_file_location(
        "bench_memo_under_test", Path(__file__).resolve().parent / "bench_memo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="session")
def base_files() -> Dict[str, bytes]:
    """The pinned base files, from .cache/pristine (fetched by the tool's own code if missing)."""
    project = find_project(TOOL_LIB)
    ensure_pristine(project, Runner(log_file=project.log_file))
    return {path: (project.pristine / path).read_bytes()
            for path, digest in sorted(read_base_hashes(project).items()) if digest != ABSENT}


def pristine_checkout(root: Path) -> Path:
    """A pristine v1.13.1 tree at root: upstream's test/ and the base files, made from the cached
    checkout whether or not `patchset run` has applied the series to it."""
    project = find_project(TOOL_LIB)
    ensure_pristine(project, Runner(log_file=project.log_file))
    return copy_pristine_tree(project, project.default_checkout, root, ["test"])


def make_patched_checkout(checkout: Path) -> Path:
    """A pristine tree (see pristine_checkout) patched by `apply`."""
    pristine_checkout(checkout)
    proc = run_tool(REPO, "apply", "--checkout", str(checkout))
    assert proc.returncode == 0, proc.stderr
    return checkout


MAINTAINER = "Mae Maintainer <mae@example.org>"


def fresh_clone(root: Path) -> Path:
    """A clone of this repository where nothing ran (HEAD, with the work tree's tool and patches/):
    no .venv, no author set, no .cache but the verified orig tarball `pristine` fetches (linked
    in: fetching it needs the network, which CI may lack)."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True)
    for name in ("build_scripts", "patches"):
        shutil.rmtree(root / name)
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    tarball = json.loads((REPO / "patches/base.json").read_text())["orig_tarball"]
    (root / ".cache/debian-source").mkdir(parents=True)
    (root / ".cache/debian-source" / tarball).symlink_to(REPO / ".cache/debian-source" / tarball)
    return root


def series_copy(root: Path) -> Path:
    """This project's tool, series, generated tests and pristine base files, plus the series
    author a maintainer sets once (this repository holds none): exports run on the copy."""
    for name in ("build_scripts", "patches"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for path in GENERATED_TESTS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, root / path)
    shutil.copytree(REPO / ".cache/pristine", root / ".cache/pristine")
    proc = run_tool(root, "author", "set", MAINTAINER)
    assert proc.returncode == 0, proc.stderr
    return root


class TmpProject:
    """A copy of the tool and the base facts in tmp_path, with its own patches/ and .cache/."""

    def __init__(self, root: Path, base: Mapping[str, bytes]) -> None:
        self.root = root
        self.base = dict(base)
        copy_tool(root)
        (root / "patches").mkdir()
        for name in ("base.json", "base.sha256", "identity.json"):
            shutil.copyfile(REPO / "patches" / name, root / "patches" / name)
        self.write_tree(root / ".cache" / "pristine")

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def overlay(self) -> Path:
        return self.root / "torch_overlay"

    def write_tree(self, target: Path, files: Optional[Mapping[str, bytes]] = None) -> Path:
        for path, data in (self.base if files is None else files).items():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).write_bytes(data)
        return target

    def tool(self, *args: str) -> subprocess.CompletedProcess:
        return run_tool(self.root, *args)

    def make_series(self, commits: Sequence[Tuple[str, str, Mapping[str, Edit], bool]]) -> Dict[str, bytes]:
        """Commit each (subject, author, edits, exported) on top of the base in a seed repo and
        `git format-patch` the exported ones into patches/ + series. Returns the files at the
        last commit (the expected patched result when every commit is exported)."""
        seed = self.write_tree(self.root.parent / f"seed-{self.root.name}")
        git("init", "-q", cwd=seed)
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "base", cwd=seed)
        names: List[str] = []
        for subject, author, edits, exported in commits:
            for path, edit in edits.items():
                # a path the base lacks is created from ""
                old = (seed / path).read_text() if (seed / path).is_file() else ""
                (seed / path).parent.mkdir(parents=True, exist_ok=True)
                (seed / path).write_text(edit(old))
                git("add", path, cwd=seed)
            git("commit", "-q", "-a", "-m", subject, "-m", f"Why: {subject.lower()}.",
                f"--author={author}", cwd=seed)
            if exported:
                out = git("format-patch", "-1", "HEAD", f"--start-number={len(names) + 1}",
                          "-o", str(self.patches), cwd=seed)
                names.append(Path(out.strip()).name)
        (self.patches / "series").write_text("".join(n + "\n" for n in names))
        touched = {path for _, _, edits, _ in commits for path in edits}
        return {path: (seed / path).read_bytes() for path in sorted({*self.base, *touched})}


FAKE = "torch/_subclasses/fake_tensor.py"
META = "torch/_subclasses/meta_utils.py"
TEST = "test/test_fake_tensor.py"

GOOD_SERIES = [
    ("Meta utils: first change", "Ada Author <ada@example.invalid>",
     {META: insert_line(20, "# patchset-test: first"), FAKE: insert_line(30, "# patchset-test: first")}, True),
    ("Fake tensor and tests: second change", "Bob Builder <bob@example.invalid>",
     {FAKE: insert_line(120, "# patchset-test: second"), TEST: insert_line(12, "# patchset-test: second")}, True),
]


@pytest.fixture
def tmp_project(tmp_path: Path, base_files: Dict[str, bytes]) -> TmpProject:
    return TmpProject(tmp_path / "project", base_files)


@pytest.fixture
def good_series(tmp_project: TmpProject) -> Dict[str, bytes]:
    """Two applicable patches by two authors; returns the expected patched files."""
    return tmp_project.make_series(GOOD_SERIES)


@pytest.fixture
def plain_checkout(tmp_path: Path, tmp_project: TmpProject) -> Path:
    """A non-git checkout: the base files plus an unrelated file."""
    checkout = tmp_project.write_tree(tmp_path / "checkout")
    (checkout / "setup.py").write_text("# not touched by the series\n")
    return checkout


@pytest.fixture
def git_checkout(tmp_path: Path, tmp_project: TmpProject) -> Path:
    """A git checkout with the base files committed and a clean tree."""
    checkout = tmp_project.write_tree(tmp_path / "git-checkout")
    git("init", "-q", cwd=checkout)
    git("add", "-A", cwd=checkout)
    git("commit", "-q", "-m", "PyTorch 1.13.1 base", cwd=checkout)
    return checkout


# ---- small projects for the series tools ------------------------------------------------------

# Deliberately not sorted (test/ < torch/): refresh must keep the order of base.sha256's lines.
SMALL_BASE: Dict[str, bytes] = {
    META: b"def meta():\n    return 1\n",
    FAKE: b"def fake():\n    return 2\n",
    TEST: b"import unittest\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
}
IDENTITY = {"name": "Fake Tensor Patch Set", "email": "patchset@example.invalid",
            "date": "2026-12-02T00:00:00+00:00"}
UPSTREAM_COMMIT = "49444c3e546bf240bed24a101e747422d1f8a0ee"
BASE_PIN = {"upstream_tag": "v1.13.1", "upstream_commit": UPSTREAM_COMMIT, "tree_dir": "pytorch-1.13.1", "debian_source_package": "pytorch",
            "debian_source_version": "1.13.1+dfsg-4", "system_python": "/usr/bin/python3.11"}


class SeriesEdit(NamedTuple):
    """One commit of a synthetic series: its message and the files it writes."""
    message: str
    files: Mapping[str, bytes]
    author_date: Optional[str] = None  # None: the date of patches/identity.json
    author: Optional[Tuple[str, str]] = None  # (name, email); None: patches/identity.json's


def make_small_project(root: Path, files: Mapping[str, bytes] = SMALL_BASE) -> Project:
    """patches/ facts (identity, pin, base.sha256 of files, in their order) and .cache/pristine."""
    (root / "patches").mkdir(parents=True)
    (root / "patches/identity.json").write_text(json.dumps(IDENTITY))
    (root / "patches/base.json").write_text(json.dumps(BASE_PIN))
    (root / "patches/base.sha256").write_text("".join(f"{sha(d)}  {p}\n" for p, d in files.items()))
    series_io.write_files(root / ".cache/pristine", files)
    return Project(root)


def commit(repo: Path, runner: Runner, message: str, files: Mapping[str, bytes],
           env: Mapping[str, str]) -> None:
    """Write files into repo and commit them all, with env's identity and dates."""
    series_io.write_files(repo, files)
    runner.git("add", "-A", cwd=repo, env=env, capture=True)
    runner.git("commit", "-q", "-m", message, cwd=repo, env={**series_io.isolated_env(), **env},
               capture=True)


def commit_series(project: Project, runner: Runner, edits: Sequence[SeriesEdit],
                  work: Path) -> List[Path]:
    """Commit the edits on the pristine base in work/series-repo, with the tool's identity, and
    write the canonical series into patches/ (as the lead commits one)."""
    repo = work / "series-repo"
    base = series_io.make_base_repo(series_io.pristine_files(project), repo, runner)
    for edit in edits:
        env = series_io.commit_env(project)
        if edit.author_date is not None:
            env["GIT_AUTHOR_DATE"] = edit.author_date
        if edit.author is not None:
            env["GIT_AUTHOR_NAME"], env["GIT_AUTHOR_EMAIL"] = edit.author
        commit(repo, runner, edit.message, edit.files, env)
    return series_io.format_series(repo, base, project.patches, runner)


@pytest.fixture
def runner() -> Runner:
    return Runner(echo=False)


# ---- a Debian source package with a patch of its own -----------------------------------------

DEBIAN_OWN_PATCH = b"""Description: Debian's own change to setup.py
Author: A Debian Maintainer <maint@example.org>
Forwarded: not-needed
---
--- a/setup.py
+++ b/setup.py
@@ -1 +1 @@
-# untouched
+# changed by Debian
"""
DEBIAN_SERIES = "# the package's own patches\n0001-debian-setup.patch\n"


def package_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    """An unpacked source package: files, a setup.py, and a debian/patches holding one patch of
    the package's own (to setup.py) in its series."""
    series_io.write_files(root, {**files, "setup.py": b"# untouched\n"})
    series_io.write_files(root / "debian/patches", {"series": DEBIAN_SERIES.encode(),
                                                    "0001-debian-setup.patch": DEBIAN_OWN_PATCH})
    return root
