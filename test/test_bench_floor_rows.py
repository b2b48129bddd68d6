"""The floor rows of test/bench_memo.py (T1-T3: the fake trace against the same trace over
meta-device tensors, and the time inside FakeTensorMode's dispatch and its kernel invocations)
and the CPU-time figures of the model zoo (Z1) and the torchdynamo compiles (D1-D4)."""
from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import types
from typing import Any, Iterator

import pytest


def fake_tensor_module() -> types.ModuleType:
    """A stand-in for torch._subclasses.fake_tensor: a dispatch that re-enters itself once and
    nests kernel invocations, looking both up at call time as the real module does."""
    module = types.ModuleType("fake_tensor_stand_in")

    @contextlib.contextmanager
    def in_kernel_invocation_manager(mode: Any) -> Iterator[None]:
        yield

    class FakeTensorMode:
        def __torch_dispatch__(self, func: str, types: Any = (), args: Any = (),
                               kwargs: Any = None) -> str:
            with module.in_kernel_invocation_manager(self):
                with module.in_kernel_invocation_manager(self):
                    pass
            if func == "outer":
                return self.__torch_dispatch__("inner")
            return func

    module.in_kernel_invocation_manager = in_kernel_invocation_manager
    module.FakeTensorMode = FakeTensorMode
    return module


def test_dispatch_clock_counts_outermost_calls_once_and_restores_the_originals(
        bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count()
    monkeypatch.setattr(bench.time, "process_time", lambda: next(ticks))
    module = fake_tensor_module()
    dispatch = module.FakeTensorMode.__torch_dispatch__
    invocation = module.in_kernel_invocation_manager
    clock = bench.DispatchClock(module)
    undo = clock.install()
    try:
        assert module.FakeTensorMode().__torch_dispatch__("outer") == "inner"
    finally:
        undo()
    # ticks: dispatch starts at 0; the outer call's kernels run 1-2, the nested call's 3-4
    # (the nested dispatch and the inner invocations read no clock); dispatch ends at 5
    assert clock.seconds == {"dispatch": 5, "kernels": 2}
    assert clock.depth == {"dispatch": 0, "kernels": 0}
    assert module.FakeTensorMode.__torch_dispatch__ is dispatch
    assert module.in_kernel_invocation_manager is invocation


def test_floor_rows_are_run_by_default_and_judged_against_the_meta_device_trace(
        bench: Any) -> None:
    assert {"T1", "T2", "T3"} <= set(bench.WORKLOADS) - set(bench.NAMED_ONLY)
    agg = {"patched": {"fake_over_meta": (0.9, 1.2)}, "unpatched": {}}
    assert bench.targets("T1", agg)["fake_over_meta"] == ("<= 1.0", "MISS")
    agg["patched"]["fake_over_meta"] = 0.95
    assert bench.targets("T2", agg)["fake_over_meta"] == ("<= 1.0", "PASS")


def zoo_result(**models: Any) -> Any:
    metrics = {}
    for name, (status, ms, cpu_ms) in models.items():
        metrics.update({f"{name}|status": status, f"{name}|fallback": 0, f"{name}|nodes": 10,
                        f"{name}|ms": ms, f"{name}|cpu_ms": cpu_ms, f"{name}|alive": 0})
    return [{"metrics": metrics}]


def test_zoo_totals_wall_and_cpu_time_over_the_models_every_runtime_traced(bench: Any) -> None:
    runtimes = [bench.Runtime(name, "python", {}, "any") for name in ("unpatched", "patched")]
    results = {
        "unpatched": zoo_result(a=("traced", 2000, 1500), b=("RuntimeError: no", 10, 10),
                                c=("traced", 4000, 3500)),
        "patched": zoo_result(a=("traced", 1000, 500), b=("traced", 700, 600),
                              c=("traced", 2000, 1000)),
    }
    text = bench.render_zoo(runtimes, results)
    assert "unpatched: 6.0 s wall, 5.0 s CPU over the 2 models every runtime traced" in text
    assert "patched: 3.0 s wall, 1.5 s CPU over the 2 models every runtime traced" in text
    assert "1,000 ms (500 CPU)" in text


def test_compile_cpu_time_counts_children_that_have_exited(bench: Any) -> None:
    import resource

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before, before_children = bench.cpu_seconds_with_children(), children_cpu()
    subprocess.run([sys.executable, "-c", "sum(range(3 * 10 ** 7))"], check=True)
    spent_by_child = children_cpu() - before_children
    assert spent_by_child > 0
    assert bench.cpu_seconds_with_children() - before >= spent_by_child
