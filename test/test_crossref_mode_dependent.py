"""Silent mismatches whose real reference depends on the dispatch mode (test/crossref.py).

A fake always runs inside a dispatch mode, and some of 1.13.1's real kernels take another path
when any mode is active (at::max_pool1d returns a fresh tensor only when no mode is active and
the input needs no grad). The script reruns the real reference of every silent mismatch under a
no-op mode and classifies the record as "real depends on mode" only when that rerun differs from
the real run outside the mode and the fake matches it in every compared field.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.testing._internal.opinfo.core import SampleInput
from torch.utils._python_dispatch import _get_current_dispatch_mode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import crossref  # noqa: E402

CROSSREF = HERE / "crossref.py"
MAX_POOL1D, PIXEL_SHUFFLE = "nn.functional.max_pool1d", "nn.functional.pixel_shuffle"


@pytest.fixture(scope="module")
def quick_functional(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossref") / "mode.json"
    proc = subprocess.run(
        [sys.executable, str(CROSSREF), "--ops", f"{MAX_POOL1D},{PIXEL_SHUFFLE}", "--quick",
         "--variants", "functional", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.mark.parametrize("side", ["unpatched", "patched"])
def test_max_pool1d_view_mismatch_is_classified_as_real_depending_on_the_mode(quick_functional, side):
    proc, sides = quick_functional
    assert sides is not None, proc.stderr[-2000:]
    records = [r for r in sides[side] if r["op"] == MAX_POOL1D]
    assert {r["class"] for r in records} == {"same", crossref.MODE_DEPENDENT}, proc.stdout
    dependent = [r for r in records if r["class"] == crossref.MODE_DEPENDENT]
    assert [r["fields"] for r in dependent] == [["output 0 is_view"]] * len(dependent)
    assert sides["real_depends_on_mode"][side] == [
        {"op": MAX_POOL1D, "variant": "functional", "sample": r["sample"], "fields": ["output 0 is_view"]}
        for r in dependent]
    samples = crossref.sample_ranges([r["sample"] for r in dependent])
    assert f"  {MAX_POOL1D} functional [output 0 is_view]: {len(dependent)}, samples {samples}" in proc.stdout


def test_unpatched_pixel_shuffle_aliasing_stays_a_silent_mismatch(quick_functional):
    proc, sides = quick_functional
    assert sides is not None, proc.stderr[-2000:]
    unpatched = [r for r in sides["unpatched"] if r["op"] == PIXEL_SHUFFLE]
    mismatches = [r for r in unpatched if r["class"] == "silent mismatch"]
    assert len(mismatches) >= 1, proc.stdout
    assert all(r["fields"] == ["output 0 alias"] for r in mismatches)
    assert crossref.MODE_DEPENDENT not in {r["class"] for r in unpatched}
    assert PIXEL_SHUFFLE not in {r["op"] for r in sides["real_depends_on_mode"]["unpatched"]}
    assert proc.returncode == 0, proc.stdout


def column_major(t):
    return t.t().contiguous().t()


class ModeSensitiveOp:
    """x * 2: row-major outside a dispatch mode, a column-major view inside one; on fakes the
    layout `fake_layout` says: "column" as real inside a mode, "row" as real outside one, or
    "fresh column", a column-major tensor that is no view, like neither."""

    name, variant_test_name = "mode_sensitive", ""

    def __init__(self, fake_layout):
        self.fake_layout = fake_layout

    def __call__(self, x):
        y = x * 2
        if isinstance(x, FakeTensor):
            if self.fake_layout == "fresh column":
                return torch.empty_strided(y.shape, (1, y.shape[0]))
            return column_major(y) if self.fake_layout == "column" else y
        return column_major(y) if _get_current_dispatch_mode() is not None else y


@pytest.mark.parametrize("fake_layout,expected,fields", [
    ("column", crossref.MODE_DEPENDENT, ["output 0 stride", "output 0 is_view"]),
    ("fresh column", "silent mismatch", ["output 0 stride"]),
])
def test_mode_dependent_only_when_the_fake_matches_the_real_run_inside_a_mode(fake_layout, expected, fields):
    record = crossref.run_case(ModeSensitiveOp(fake_layout), "functional", 0,
                               SampleInput(torch.randn(3, 4)), crossref.FallbackLog())
    assert record["class"] == expected
    assert record["fields"] == fields


def test_fake_matching_the_real_run_outside_a_mode_is_the_same():
    record = crossref.run_case(ModeSensitiveOp("row"), "functional", 0,
                               SampleInput(torch.randn(3, 4)), crossref.FallbackLog())
    assert record["class"] == "same"


class FakeOnlyStrideOp:
    """x * 2, column-major on fakes only: real inside and outside a mode agree."""

    name, variant_test_name = "fake_only_stride", ""

    def __call__(self, x):
        y = x * 2
        return column_major(y) if isinstance(x, FakeTensor) else y


def test_mismatch_whose_real_reference_ignores_the_mode_stays_silent():
    record = crossref.run_case(FakeOnlyStrideOp(), "functional", 0, SampleInput(torch.randn(3, 4)),
                               crossref.FallbackLog())
    assert record["class"] == "silent mismatch"
    assert record["fields"] == ["output 0 stride", "output 0 is_view"]


def test_rerun_that_raises_keeps_the_silent_mismatch():
    def raising():
        raise RuntimeError("rerun failed")

    assert crossref.mismatch_class([["a"]], [["b"]], raising) == "silent mismatch"
    assert crossref.mismatch_class([["a"]], [["b"]], lambda: [["b"]]) == crossref.MODE_DEPENDENT
    assert crossref.mismatch_class([["a"]], [["b"]], lambda: [["a"]]) == "silent mismatch"


def test_differing_fields_names_each_entry_of_the_rows():
    row = ["torch.float32", [2, 3], [3, 1], 0, "cpu", False, "fresh"]
    other = ["torch.float32", [2, 3], [1, 2], 0, "cpu", True, "is input 0"]
    assert crossref.differing_fields([row, row], [row, other], ["output 0", "input 0"]) == \
        ["input 0 stride", "input 0 is_view", "input 0 alias"]
    assert crossref.differing_fields([row], [["value", "int"]], ["output 0"]) == ["output 0 metadata"]
    assert crossref.differing_fields([row], [row, row], ["output 0"]) == ["tensor count"]


def test_sample_ranges_compress_consecutive_samples():
    assert crossref.sample_ranges([7, 0, 1, 2, 3, 9, 10]) == "0-3, 7, 9-10"
