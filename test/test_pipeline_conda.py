"""`patchset export --conda-forge DIR`: the git patches without the cover letter and a meta.yaml
fragment listing them, applied as conda-build applies a recipe's `source: patches:` (each file in
order with `patch -p1 --forward --batch`) onto a tree from `patchset pristine`: the torch/ files
that makes are the overlay's. Like the other exports it refuses a non-empty DIR, writing
nothing, and without patches/author.json names the series' own identity. Runs on this project's real series (conftest.series_copy).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
import yaml
from conftest import MAINTAINER, REPO, TOOL_LIB, run_tool, series_copy, sha, tree_hashes

from patchset_lib.authorship import author_file
from patchset_lib.common import Project, find_project
from patchset_lib.generated_tests import GENERATED_TESTS
from patchset_lib.overlay import read_manifest

SERIES = (REPO / "patches/series").read_text().split()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return series_copy(tmp_path_factory.mktemp("conda") / "project")


@pytest.fixture(scope="module")
def recipe(project: Path) -> Path:
    out = project.parent / "recipe"
    proc = run_tool(project, "export", "--conda-forge", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def listed_patches(recipe: Path) -> List[str]:
    return yaml.safe_load((recipe / "meta.yaml").read_text())["source"]["patches"]


def test_meta_yaml_lists_the_patches_in_series_order(recipe: Path) -> None:
    text = (recipe / "meta.yaml").read_text()
    assert text.startswith("# meta.yaml fragment for a conda-forge recipe")
    assert "applies with `patch -p1` to the pytorch 1.13.1 source" in text
    assert listed_patches(recipe) == SERIES
    assert sorted(p.name for p in recipe.iterdir()) == sorted([*SERIES, "meta.yaml"])  # no cover letter
    for name in SERIES:
        patch = (recipe / name).read_text()
        assert f"\nFrom: {MAINTAINER}\n" in patch and not re.search(r"@[\w.-]+\.invalid\b", patch)


def test_patch_p1_applies_each_listed_patch_in_order_onto_a_pristine_tree(recipe: Path, tmp_path: Path) -> None:
    patch = shutil.which("patch")
    assert patch, "GNU patch is not installed (apt-get install patch): conda-build applies a recipe's patches with it"
    tree = tmp_path / "pytorch-1.13.1"
    proc = run_tool(REPO, "pristine", str(tree))
    assert proc.returncode == 0, proc.stderr
    for name in listed_patches(recipe):
        applied = subprocess.run([patch, "-p1", "--forward", "--batch", "-i", str(recipe / name)], cwd=tree,
                                 capture_output=True, text=True)
        assert applied.returncode == 0, f"{name}:\n{applied.stdout}{applied.stderr}"
        assert "fuzz" not in applied.stdout and "offset" not in applied.stdout, f"{name}:\n{applied.stdout}"
    entries = read_manifest(find_project(TOOL_LIB))
    result = {e.path: sha((tree / e.path).read_bytes()) for e in entries}
    assert result == {e.path: sha((REPO / "torch_overlay" / e.path).read_bytes()) for e in entries}
    assert result == {e.path: e.result_sha256 for e in entries}
    assert {p: sha((tree / p).read_bytes()) for p in GENERATED_TESTS} == {
        p: sha((REPO / p).read_bytes()) for p in GENERATED_TESTS}


def test_refuses_a_non_empty_dir_writing_nothing(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipe"
    out.mkdir()
    (out / "meta.yaml").write_text("mine\n")
    proc = run_tool(project, "export", "--conda-forge", str(out))
    assert proc.returncode == 1
    assert f"patchset export: error: {out} exists and is not an empty directory" in proc.stderr
    assert tree_hashes(out) == {"meta.yaml": sha(b"mine\n")}


def test_without_author_json_names_the_series_identity(tmp_path: Path) -> None:
    project = series_copy(tmp_path / "project")
    author_file(Project(project)).unlink()
    out = tmp_path / "recipe"
    proc = run_tool(project, "export", "--conda-forge", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == ("author: Fake Tensor Patch Set <patchset@fake-tensor-patchset"
                                           ".invalid> (patches/identity.json; set another with "
                                           "'patchset author set')")
    first = (out / sorted(p.name for p in out.iterdir() if p.suffix == ".patch")[0]).read_text()
    assert "\nFrom: Fake Tensor Patch Set <patchset@fake-tensor-patchset.invalid>\n" in first


def test_refuses_the_quilt_format(project: Path, tmp_path: Path) -> None:
    proc = run_tool(project, "export", "--format", "quilt", "--conda-forge", str(tmp_path / "recipe"))
    assert proc.returncode == 1
    assert "patchset export: error: --conda-forge takes the git format only" in proc.stderr
    assert not (tmp_path / "recipe").exists()
