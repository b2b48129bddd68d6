"""The committed series agrees with everything generated from it.

These run on the real project (not a copy): torch_overlay/, its MANIFEST and the generated
test/test_fake_tensor.py must be base + series, and the interpreter running the tests must load
the overlay, so that the behaviour tests in test_fake_tensor.py exercise the patched modules.
Each patch touching torch/ brings tests, its message stays short, and what ships upstream names
no issue, patch number or timing.  A minimal checkout patched with the series runs upstream's
tests and ours, and both exports apply for real (git am, quilt push/pop).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest

from conftest import patch_paths, run_tool, series_copy
from patchset_lib.generated_tests import GENERATED_TESTS

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "build_scripts" / "patchset"


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "-q", *args], cwd=REPO,
                          capture_output=True, text=True)


# every base file the series touches, as pinned
# files the base has (`absent` marks a file the series creates)
BASE_FILES = tuple(line.split()[1] for line in
                   (REPO / "patches" / "base.sha256").read_text().splitlines()
                   if line.strip() and line.split()[0] != "absent")


def pristine_tree(root: Path) -> Path:
    """A minimal checkout: the pristine base files at their in-tree paths."""
    for rel in BASE_FILES:
        assert (REPO / ".cache" / "pristine" / rel).is_file(), "run ./build_scripts/patchset setup"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((REPO / ".cache" / "pristine" / rel).read_bytes())
    return root


def file_bytes(root: Path) -> dict:
    return {rel: (root / rel).read_bytes() for rel in BASE_FILES}


def patched_bytes(tmp_path: Path) -> dict:
    """The base files after the real series, as `apply` makes them."""
    tree = pristine_tree(tmp_path / "applied")
    proc = tool("apply", "--checkout", str(tree))
    assert proc.returncode == 0, proc.stderr
    return file_bytes(tree)


def test_overlay_manifest_and_generated_tests_match_base_plus_series() -> None:
    proc = tool("overlay", "--check")
    assert proc.returncode == 0, proc.stderr


def test_series_lists_existing_patches_only() -> None:
    listed = [line.strip() for line in (REPO / "patches" / "series").read_text().splitlines()
              if line.strip()]
    on_disk = sorted(p.name for p in (REPO / "patches").glob("*.patch"))
    assert sorted(listed) == on_disk
    assert listed == sorted(listed), "series order follows the NNNN numbering"


def test_this_interpreter_loads_the_overlay() -> None:
    import torch._subclasses.fake_tensor as fake_tensor
    import torch._subclasses.meta_utils as meta_utils

    overlay = REPO / "torch_overlay" / "torch" / "_subclasses"
    assert Path(fake_tensor.__file__) == overlay / "fake_tensor.py"
    assert Path(meta_utils.__file__) == overlay / "meta_utils.py"
    import torch.fx.experimental.proxy_tensor as proxy_tensor

    assert Path(proxy_tensor.__file__) == REPO / "torch_overlay/torch/fx/experimental/proxy_tensor.py"


# Upstream tests that free a memoized fake by dropping its last reference: the series keeps
# memoized fakes owned by Python until the cyclic gc runs, and adds gc.collect() to them.
UPSTREAM_TESTS_NEEDING_GC = {"test_dead_weak_ref", "test_no_ref_cycle"}


def test_patched_checkout_runs_upstream_and_our_tests(tmp_path: Path) -> None:
    """`apply` the real series to a minimal checkout, then run the checkout's
    test/test_fake_tensor.py and test/test_weak.py as scripts, the way a source build would:
    they run upstream's tests and every test the patches add there (the files the repo keeps as
    generated).  Upstream's unpatched file passes too, but for the tests the series changes on
    purpose."""
    def tests_ran(checkout: Path, failing: Set[str] = frozenset(),
                  script: str = "test_fake_tensor.py") -> int:
        # CI=true makes upstream's run_tests() write XML reports through xmlrunner, which
        # upstream's CI installs and a source build does not need.
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        run = subprocess.run([sys.executable, script], cwd=checkout / "test",
                             capture_output=True, text=True, env=env)
        failed = set(re.findall(r"^(?:FAIL|ERROR): (\w+) ", run.stderr, re.M))
        assert failed == failing, run.stderr[-3000:]
        assert (run.returncode == 0) == (not failing), run.stderr[-3000:]
        summary = [line for line in run.stderr.splitlines() if line.startswith("Ran ")]
        assert len(summary) == 1, run.stderr[-3000:]
        return int(summary[0].split()[1])

    pristine = pristine_tree(tmp_path / "pristine")
    patched = pristine_tree(tmp_path / "patched")
    proc = tool("apply", "--checkout", str(patched))
    assert proc.returncode == 0, proc.stderr
    for path in GENERATED_TESTS:
        assert (patched / path).read_bytes() == (REPO / path).read_bytes(), path
    assert tests_ran(patched, script="test_weak.py") == collected_tests(REPO / "test/test_weak.py") > 0
    generated = REPO / "test" / "test_fake_tensor.py"
    everything = collected_tests(generated)
    assert everything >= len(ast_test_methods(generated)) > 0
    assert tests_ran(patched) == everything > tests_ran(pristine, UPSTREAM_TESTS_NEEDING_GC)


def collected_tests(path: Path) -> int:
    """Tests unittest finds in the file, parametrized ones expanded (they are made at import)."""
    script = ("import importlib.util, sys, unittest\n"
              "spec = importlib.util.spec_from_file_location('ours', sys.argv[1])\n"
              "mod = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(mod)\n"
              "print(unittest.defaultTestLoader.loadTestsFromModule(mod).countTestCases())\n")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, check=True)
    return int(proc.stdout.split()[-1])


def ast_test_methods(path: Path) -> list:
    tree = ast.parse(path.read_text())
    return [node.name for cls in tree.body if isinstance(cls, ast.ClassDef)
            for node in cls.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


# Exports name the series author of patches/author.json, which this repository does not hold:
# they run on a copy that has one (conftest.series_copy).
PLACEHOLDER = re.compile(r"[@.][\w.-]*\.invalid\b")


def test_git_export_of_the_series_applies_with_git_am(tmp_path: Path) -> None:
    out = tmp_path / "git-export"
    proc = run_tool(series_copy(tmp_path / "project"), "export", "--format", "git", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    repo = pristine_tree(tmp_path / "repo")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True)
    patches = sorted(p for p in out.glob("*.patch") if not p.name.startswith("0000-"))
    assert len(patches) == len((REPO / "patches" / "series").read_text().split())
    am = subprocess.run(["git", "am", "-q", *map(str, patches)], cwd=repo, env=env,
                        capture_output=True, text=True)
    assert am.returncode == 0, am.stderr
    assert file_bytes(repo) == patched_bytes(tmp_path)
    assert [p.name for p in out.iterdir() if PLACEHOLDER.search(p.read_text())] == []
    cover = (out / "0000-cover-letter.patch").read_text()
    assert cover.endswith("\nbase-commit: 49444c3e546bf240bed24a101e747422d1f8a0ee\n")


def test_quilt_export_of_the_series_pushes_and_pops(tmp_path: Path) -> None:
    out = tmp_path / "debian-patches"
    proc = run_tool(series_copy(tmp_path / "project"), "export", "--format", "quilt", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    tree = pristine_tree(tmp_path / "pytorch-1.13.1")
    before = file_bytes(tree)
    env = {**os.environ, "QUILT_PATCHES": str(out)}
    push = subprocess.run(["quilt", "--quiltrc", "-", "push", "-a"], cwd=tree, env=env,
                          capture_output=True, text=True)
    assert push.returncode == 0, push.stdout + push.stderr
    assert file_bytes(tree) == patched_bytes(tmp_path)
    pop = subprocess.run(["quilt", "--quiltrc", "-", "pop", "-a"], cwd=tree, env=env,
                         capture_output=True, text=True)
    assert pop.returncode == 0, pop.stdout + pop.stderr
    assert file_bytes(tree) == before
    for name in (out / "series").read_text().split():
        assert dep3_fields(out / name, commit_trailers(REPO / "patches" / name)) == [], name


DEP3_ORDER = ("Description", "Author", "Origin", "Bug", "Forwarded", "Last-Update")


def commit_trailers(patch: Path) -> dict:
    """`Key: value` lines of the last paragraph of a patch file's commit message."""
    paragraphs = patch.read_text().split("\n---\n", 1)[0].strip().split("\n\n")
    return dict(line.split(": ", 1) for line in paragraphs[-1].splitlines() if ": " in line)


def dep3_fields(patch: Path, trailers: dict) -> list:
    """What is wrong with the DEP-3 header of an exported quilt patch (empty: nothing)."""
    header = patch.read_text().split("\n---\n", 1)[0]
    fields = dict(line.split(": ", 1) for line in header.splitlines()
                  if not line.startswith(" ") and ": " in line)
    wanted = [k for k in DEP3_ORDER if k != "Bug" or "Bug" in trailers]
    problems = [f"missing {k}" for k in wanted if k not in fields]
    if "Bug" in trailers and fields.get("Bug") != trailers["Bug"]:
        problems.append(f"Bug is {fields.get('Bug')!r}, the commit says {trailers['Bug']!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", fields.get("Last-Update", "")):
        problems.append("Last-Update is not YYYY-MM-DD")
    if PLACEHOLDER.search(fields.get("Author", "")) or "<" not in fields.get("Author", ""):
        problems.append(f"Author {fields.get('Author')!r} is no real address")
    if re.search(r"://(?!github\.com/)", fields.get("Origin", "")):
        problems.append("Origin names a host other than github.com")
    return problems


# ---- the shape of the series -------------------------------------------------------------------

SERIES = [REPO / "patches" / name for name in
          (REPO / "patches" / "series").read_text().split()]
MAX_BODY_LINES = 30
# issue numbers, timings and patch numbers: history that must not ship upstream
HISTORY = re.compile(r"issue [0-9]|[0-9] ?us\b|\u00b5s|patch 000[0-9]")


def message_body(patch: Path) -> list:
    """The commit message's lines after the subject, as format-patch writes them."""
    text = patch.read_text()
    head, _, rest = text.partition("\n\n")
    body = rest.split("\n---\n", 1)[0]
    return body.strip("\n").splitlines()


@pytest.mark.parametrize("patch", SERIES, ids=lambda p: p.name[:4])
def test_patch_touching_torch_touches_a_test_file(patch: Path) -> None:
    paths = patch_paths(patch)
    if any(p.startswith("torch/") for p in paths):
        assert [p for p in paths if p.startswith("test/")], f"{patch.name} adds no test"


def test_commit_message_bodies_are_short() -> None:
    long = {p.name: len(message_body(p)) for p in SERIES if len(message_body(p)) > MAX_BODY_LINES}
    assert long == {}


def history_hits(paths) -> list:
    return [f"{path}:{n}: {line.strip()}" for path in paths
            for n, line in enumerate(path.read_text().splitlines(), 1) if HISTORY.search(line)]


def test_generated_test_files_name_no_issue_patch_or_timing() -> None:
    assert history_hits([REPO / path for path in GENERATED_TESTS]) == []


def test_patched_modules_name_no_issue_patch_or_timing() -> None:
    manifest = (REPO / "torch_overlay" / "MANIFEST").read_text().split("\n")
    paths = [REPO / "torch_overlay" / line.split()[0] for line in manifest if line.strip()]
    assert history_hits(paths) == []
