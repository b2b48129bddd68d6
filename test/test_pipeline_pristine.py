"""`patchset pristine DIR`: a pristine v1.13.1 tree from the verified orig tarball of the
project's cache; a DIR that exists and is not empty is refused with nothing changed. With --git,
a clean git checkout of it tagged v1.13.1, made on a machine where git knows nobody."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, TOOL_LIB, run_tool, sha, tree_hashes

from patchset_lib.common import ABSENT, base_pin, find_project, read_base_hashes

BASE = read_base_hashes(find_project(TOOL_LIB))


@pytest.mark.parametrize("exists", [False, True])
def test_pristine_writes_the_base_tree(tmp_path: Path, exists: bool) -> None:
    tree = tmp_path / "new" / "pytorch"
    if exists:
        tree.mkdir(parents=True)
    proc = run_tool(REPO, "pristine", str(tree))
    assert proc.returncode == 0, proc.stderr
    assert f"pristine: {tree} is PyTorch v1.13.1" in proc.stdout
    for path, digest in BASE.items():
        if digest == ABSENT:
            assert not (tree / path).exists(), path  # the series creates it
        else:
            assert sha((tree / path).read_bytes()) == digest, path
    assert (tree / "setup.py").is_file() and (tree / "test/test_nn.py").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["new"]  # no extraction leftovers beside it
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["pytorch"]


@pytest.mark.parametrize("kind", ["non-empty directory", "file"])
def test_pristine_refuses_what_exists(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("mine\n")
    else:
        target.mkdir()
        (target / "keep").write_text("mine\n")
    before = tree_hashes(tmp_path)
    proc = run_tool(REPO, "pristine", str(target))
    assert proc.returncode == 1
    assert f"patchset pristine: error: {target} exists and is not an empty directory" in proc.stderr
    assert tree_hashes(tmp_path) == before


def test_pristine_git_is_a_clean_checkout_tagged_v1131(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"  # no git identity: no config, no identity variables
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                 "EMAIL", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    tree = tmp_path / "pytorch"
    proc = run_tool(REPO, "pristine", "--git", str(tree))
    assert proc.returncode == 0, proc.stderr

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              check=True).stdout

    assert git("describe", "--tags").strip() == "v1.13.1"
    assert git("status", "--porcelain", "--ignored") == ""  # every file committed, ignored ones too
    assert git("rev-list", "--count", "HEAD").strip() == "1"
    for path, digest in BASE.items():
        if digest != ABSENT:
            assert sha(subprocess.run(["git", "-C", str(tree), "show", f"HEAD:{path}"], capture_output=True,
                                      check=True).stdout) == digest, path
    upstream = base_pin(find_project(TOOL_LIB))["upstream_commit"]
    assert git("rev-parse", "HEAD").strip() != upstream
    assert f"not upstream's commit {upstream[:12]}" in proc.stdout
