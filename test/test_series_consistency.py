"""The committed series agrees with everything generated from it.

These run on the real project (not a copy): the last patch must be what `tests-patch` makes of
test/test_fake_tensor.py, torch_overlay/ and its MANIFEST must be base + series, and the
interpreter running the tests must load the overlay, so that the behaviour tests in
test_fake_tensor.py exercise the patched modules.
"""
from __future__ import annotations

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
