"""The "fallback refusal" class of test/crossref.py: a clear error raised out of
run_fallback_kernel itself is counted apart from the other clear errors.

Run in this process (the patched side when the suite's .venv loads the overlay) on ops defined
with torch.library, whose CPU kernels are all they have, so FakeTensorMode sends them to the
fallback.
"""
import sys
from pathlib import Path

import pytest
import torch
import torch._subclasses.fake_tensor as fake_tensor
from torch.testing._internal.opinfo.core import SampleInput

sys.path.insert(0, str(Path(__file__).resolve().parent))

import crossref  # noqa: E402

_lib = torch.library.Library("crossref_refusal_test", "DEF")
_lib.define("tail(Tensor(a) x) -> Tensor(a)")
_lib.impl("tail", lambda x: x[1:], "CPU")
_lib.define("doubled(Tensor x) -> Tensor")
_lib.impl("doubled", lambda x: x * 2, "CPU")


class LibraryOp:
    variant_test_name = ""

    def __init__(self, name):
        self.name = name

    def __call__(self, x):
        return getattr(torch.ops.crossref_refusal_test, self.name)(x)


@pytest.fixture
def fallback(monkeypatch):
    # count_fallbacks replaces the module's run_fallback_kernel: put it back after the test
    monkeypatch.setattr(fake_tensor, "run_fallback_kernel", fake_tensor.run_fallback_kernel)
    return crossref.count_fallbacks()


def test_view_output_the_fallback_refuses_is_a_fallback_refusal(fallback):
    record = crossref.run_case(LibraryOp("tail"), "functional", 0, SampleInput(torch.randn(4, 3)), fallback)
    assert record["class"] == crossref.REFUSED, record
    assert record["fallback"] is True
    assert record["fallback_ops"] == ["crossref_refusal_test.tail.default"]
    assert record["detail"].startswith("UnsupportedFallbackException")


def test_fresh_output_through_the_fallback_is_compared(fallback):
    record = crossref.run_case(LibraryOp("doubled"), "functional", 0, SampleInput(torch.randn(4, 3)), fallback)
    assert record["class"] == "same", record
    assert record["fallback"] is True


def test_clear_error_outside_the_fallback_is_a_clear_error():
    assert crossref.error_class(NotImplementedError("no meta kernel")) == "clear error"
    assert crossref.error_class(RuntimeError("index out of range")) == "crash"
    marked = NotImplementedError("refused")
    setattr(marked, crossref.RAISED_BY_FALLBACK, True)
    assert crossref.error_class(marked) == crossref.REFUSED
    unclear = RuntimeError("kernel")
    setattr(unclear, crossref.RAISED_BY_FALLBACK, True)
    assert crossref.error_class(unclear) == "crash"


def test_summary_counts_refusals_in_their_own_column():
    records = [{"variant": "functional", "class": crossref.REFUSED, "fallback": True},
               {"variant": "functional", "class": "clear error", "fallback": False}]
    row = crossref.summary_rows(records)["functional"]
    assert (row[crossref.REFUSED], row["clear error"], row["fallback"]) == (1, 1, 1)
