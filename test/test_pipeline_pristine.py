"""`patchset pristine DIR`: a pristine v1.13.1 tree from the verified orig tarball of the
project's cache; a DIR that exists and is not empty is refused with nothing changed."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, TOOL_LIB, run_tool, sha, tree_hashes

from patchset_lib.common import ABSENT, find_project, read_base_hashes

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
