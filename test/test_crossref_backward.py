"""The backward variant of test/crossref.py: autograd.grad of each sample's outputs, real vs fake.

A quick run over a few ops, unpatched and patched side by side, as `patchset crossref --backward
--quick` would; the comparison itself on a synthetic op whose fake gradient has other strides;
and the variant options of the script and of the tool.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.testing._internal.opinfo.core import SampleInput

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "build_scripts"))

import crossref  # noqa: E402
from patchset_lib import crossref_cmd  # noqa: E402

CROSSREF = HERE / "crossref.py"
BACKWARD_OPS = ["abs", "addbmm", "var_mean", "nn.functional.pixel_shuffle", "nn.functional.conv2d"]


@pytest.fixture(scope="module")
def quick_backward(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossref") / "backward.json"
    proc = subprocess.run(
        [sys.executable, str(CROSSREF), "--backward", "--ops", ",".join(BACKWARD_OPS), "--quick",
         "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


def test_quick_backward_crossref_compares_both_sides_sample_by_sample(quick_backward):
    proc, sides = quick_backward
    assert sides is not None, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stdout
    keys = {label: {(r["op"], r["sample"]) for r in sides[label]} for label in ("unpatched", "patched")}
    assert keys["patched"] == keys["unpatched"]
    assert {op for op, _ in keys["patched"]} == set(BACKWARD_OPS)
    per_op = [sum(op == name for op, _ in keys["patched"]) for name in BACKWARD_OPS]
    assert all(1 <= n <= crossref.QUICK_SAMPLES for n in per_op), per_op
    for records in (sides["unpatched"], sides["patched"]):
        assert {r["variant"] for r in records} == {crossref.BACKWARD}
        assert {r["class"] for r in records} <= set(crossref.CLASSES)


def test_quick_backward_crossref_has_no_patched_silent_mismatch(quick_backward):
    proc, sides = quick_backward
    assert sides is not None, proc.stderr[-2000:]
    assert [r for r in sides["patched"] if r["class"] == "silent mismatch"] == [], proc.stdout
    assert sum(r["class"] == "same" for r in sides["patched"]) > 0


def test_backward_records_say_which_phase_reached_the_fallback(quick_backward):
    proc, sides = quick_backward
    assert sides is not None, proc.stderr[-2000:]
    for r in sides["patched"]:
        assert r["fallback"] == (r["fallback_forward"] or r["fallback_backward"])
        assert bool(r["fallback_ops"]) == r["fallback"]
    phases = crossref.backward_fallback_phases(sides["patched"])
    assert f"backward records via fallback, patched: in the forward {phases[0]}, " \
           f"in the backward {phases[1]}" in proc.stdout


class StridedGradOnFakes(torch.autograd.Function):
    """x * 2, whose backward gives fakes a column-major gradient (real: row-major)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        grad = grad * 2
        return grad.t().contiguous().t() if isinstance(grad, FakeTensor) else grad


class SyntheticOp:
    name, variant_test_name = "strided_grad_on_fakes", ""

    def __call__(self, x):
        return StridedGradOnFakes.apply(x)


def test_backward_case_reports_a_gradient_stride_the_fake_gets_wrong():
    sample = SampleInput(torch.randn(3, 4, requires_grad=True))
    record = crossref.run_backward_case(SyntheticOp(), 0, sample, crossref.FallbackLog())
    assert record["class"] == "silent mismatch"
    assert record["detail"].startswith("grad 0: real ['torch.float32', [3, 4], [4, 1]")
    assert "fake ['torch.float32', [3, 4], [1, 3]" in record["detail"]
    assert record["fallback"] is False


def test_describe_grads_names_gradients_sharing_storage_with_inputs_or_earlier_grads():
    x = torch.randn(4)
    g0, g1 = torch.randn(4), None
    g2 = g0[1:]
    rows = crossref.describe_grads([g0, g1, g2, x], [x])
    assert rows[0][-1] == "fresh"
    assert rows[1] == ["no grad"]
    assert rows[2][-1] == "shares storage of grad 0"
    assert rows[3][-1] == "is input 0"


def test_sample_without_an_input_requiring_grad_is_skipped():
    sample = SampleInput(torch.randn(3, 4))
    record = crossref.run_backward_case(SyntheticOp(), 0, sample, crossref.FallbackLog())
    assert record["class"] == "skipped"
    assert "no input requires grad" in record["detail"]


@pytest.mark.parametrize("module", [crossref, crossref_cmd], ids=["script", "tool"])
def test_variant_list_rejects_unknown_names(module):
    with pytest.raises(argparse.ArgumentTypeError, match="backwards"):
        module.variant_list("functional,backwards")
    with pytest.raises(argparse.ArgumentTypeError):
        module.variant_list(",")
    assert list(module.variant_list("out,backward")) == ["out", "backward"]


def test_script_backward_flag_selects_only_the_backward_variant():
    assert crossref.parse_args(["--backward"]).variants == (crossref.BACKWARD,)
    assert crossref.parse_args([]).variants == crossref.FORWARD_VARIANTS
    assert crossref.parse_args(["--variants", "backward,functional"]).variants == ("functional", "backward")


def test_tool_forwards_the_variant_options():
    parser = argparse.ArgumentParser()
    crossref_cmd.register(parser.add_subparsers())
    backward = parser.parse_args(["crossref", "--backward", "--ops", "abs"])
    assert crossref_cmd.forwarded_args(backward) == ["--ops", "abs", "--backward"]
    chosen = parser.parse_args(["crossref", "--variants", "out,inplace"])
    assert crossref_cmd.forwarded_args(chosen) == ["--variants", "out,inplace"]
    assert crossref_cmd.forwarded_args(parser.parse_args(["crossref"])) == []
    assert crossref_cmd.VARIANTS == crossref.VARIANTS
