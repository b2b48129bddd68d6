"""The committed series agrees with everything generated from it.

These run on the real project (not a copy): the last patch must be what `tests-patch` makes of
test/test_fake_tensor.py, torch_overlay/ and its MANIFEST must be base + series, and the
interpreter running the tests must load the overlay, so that the behaviour tests in
test_fake_tensor.py exercise the patched modules.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "build_scripts" / "patchset"


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "-q", *args], cwd=REPO,
                          capture_output=True, text=True)


def test_tests_patch_matches_test_file() -> None:
    proc = tool("tests-patch", "--check")
    assert proc.returncode == 0, proc.stderr


def test_overlay_and_manifest_match_base_plus_series() -> None:
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


def test_patched_checkout_runs_upstream_and_our_tests(tmp_path: Path) -> None:
    """`apply` the real series to a copy of the pristine base files, then run the checkout's
    test/test_fake_tensor.py as a script, the way a source build would: it runs upstream's
    tests and every test of ours."""
    def checkout_copy(name: str) -> Path:
        copy = tmp_path / name
        for rel in ("torch/_subclasses/meta_utils.py", "torch/_subclasses/fake_tensor.py",
                    "test/test_fake_tensor.py"):
            pristine = REPO / ".cache" / "pristine" / rel
            assert pristine.is_file(), "run ./build_scripts/patchset setup first"
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).write_bytes(pristine.read_bytes())
        return copy

    def tests_ran(checkout: Path) -> int:
        # CI=true makes upstream's run_tests() write XML reports through xmlrunner, which
        # upstream's CI installs and a source build does not need.
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        run = subprocess.run([sys.executable, "test_fake_tensor.py"], cwd=checkout / "test",
                             capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        summary = [line for line in run.stderr.splitlines() if line.startswith("Ran ")]
        assert len(summary) == 1, run.stderr[-3000:]
        return int(summary[0].split()[1])

    pristine, patched = checkout_copy("pristine"), checkout_copy("patched")
    proc = tool("apply", "--checkout", str(patched))
    assert proc.returncode == 0, proc.stderr
    ours = len(ast_test_methods(REPO / "test" / "test_fake_tensor.py"))
    assert ours > 0
    assert tests_ran(patched) == tests_ran(pristine) + ours


def ast_test_methods(path: Path) -> list:
    tree = ast.parse(path.read_text())
    return [node.name for cls in tree.body if isinstance(cls, ast.ClassDef)
            for node in cls.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
