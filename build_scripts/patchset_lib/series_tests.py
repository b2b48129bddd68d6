"""Which of the series' own tests a tree with some of its patches applied runs: the selection of
test/test_series_per_patch.py (each prefix of the series) and of `check --stack` (each stack
with its needs).

In test/test_weak.py, test/test_meta.py, test/test_proxy_tensor.py and test/test_fx.py: the test
classes the applied patches add. In test/test_fake_tensor.py: the whole file (upstream's tests
and the series') where the patches in question change it or a module its tests are about
(FAKE_TENSOR_PATHS), else upstream's test classes of it. Targets are pytest node ids relative to
the tree (`test/test_meta.py::TestX`).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

TEST_FILES = (
    "test/test_fake_tensor.py", "test/test_weak.py", "test/test_meta.py", "test/test_proxy_tensor.py",
    "test/test_fx.py",
)
HELPER_DIRS = {"test/test_fx.py": "test/fx"}  # upstream's modules a test file imports
WHOLE_FILE = "test/test_fake_tensor.py"
FAKE_TENSOR_PATHS = (WHOLE_FILE, "torch/_subclasses/", "torch/utils/weak.py", "torch/fx/experimental/proxy_tensor.py")


def patch_paths(patch: Path) -> List[str]:
    """The paths a git format-patch file changes."""
    return re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), flags=re.M)


def defined_test_classes(text: str) -> Dict[str, str]:
    """Top-level classes with test methods -> their source, of a test file."""
    tree = ast.parse(text)
    return {node.name: ast.get_source_segment(text, node) or "" for node in tree.body
            if isinstance(node, ast.ClassDef)
            and any(isinstance(f, ast.FunctionDef) and f.name.startswith("test_") for f in node.body)}


def added_classes(pristine: Mapping[str, bytes], repo: Path, path: str) -> List[str]:
    """Test classes of `path` that the applied patches add (new names only)."""
    if not (repo / path).is_file():
        return []
    before = defined_test_classes(pristine[path].decode()) if path in pristine else {}
    return [name for name in defined_test_classes((repo / path).read_text()) if name not in before]


def fake_tensor_targets(pristine: Mapping[str, bytes], patches: Sequence[Path]) -> List[str]:
    """test_fake_tensor.py whole where the patches change what its tests are about, else
    upstream's test classes of it."""
    if any(p.startswith(FAKE_TENSOR_PATHS) for patch in patches for p in patch_paths(patch)):
        return [WHOLE_FILE]
    return [f"{WHOLE_FILE}::{name}" for name in defined_test_classes(pristine[WHOLE_FILE].decode())]


def series_targets(pristine: Mapping[str, bytes], repo: Path, patches: Sequence[Path]) -> List[str]:
    """The node ids to run in `repo` (the base + some patches, `patches` the ones in question)."""
    return fake_tensor_targets(pristine, patches) + [
        f"{path}::{name}" for path in TEST_FILES if path != WHOLE_FILE
        for name in added_classes(pristine, repo, path)]
