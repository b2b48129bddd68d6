"""The L rows of test/bench_memo.py: traces per side, sampling and warm-up, and the torch.fx
source-cache count (entries of freed code queued for the loader's next cache() call apart)."""
from __future__ import annotations

import linecache
import sys
import types
from typing import Any, Dict, List

import pytest


def schedule(bench: Any, argv: List[str], workload: str, side: str) -> Dict[str, int]:
    sizes = bench.sizes_from_args(bench.build_parser().parse_args(argv))
    return bench.l_schedule(workload, side, sizes)


@pytest.mark.parametrize("workload, side, expected", [
    ("L1", "patched", {"traces": 2000, "every": 500, "warm": 500}),
    ("L2", "patched", {"traces": 2000, "every": 500, "warm": 500}),
    ("L1", "unpatched", {"traces": 100, "every": 25, "warm": 25}),
    ("L2", "vs", {"traces": 100, "every": 25, "warm": 25}),
    ("L3", "patched", {"traces": 500, "every": 125, "warm": 125}),
    ("L3", "unpatched", {"traces": 20, "every": 5, "warm": 5}),
])
def test_default_run_gives_the_other_sides_fewer_traces(
        bench: Any, workload: str, side: str, expected: Dict[str, int]) -> None:
    assert schedule(bench, [], workload, side) == expected


def test_long_run_traces_ten_thousand_times_with_the_slope_from_trace_1000(bench: Any) -> None:
    assert schedule(bench, ["--long"], "L1", "patched") == {
        "traces": 10_000, "every": 500, "warm": 1000}


@pytest.mark.parametrize("side", ["patched", "unpatched"])
@pytest.mark.parametrize("workload", ["L1", "L3"])
def test_l_traces_sets_every_side(bench: Any, workload: str, side: str) -> None:
    assert schedule(bench, ["--l-traces", "200"], workload, side) == {
        "traces": 200, "every": 50, "warm": 50}


def test_workers_are_told_their_side(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: List[List[str]] = []

    def fake_run(argv: List[str], **kwargs: Any) -> Any:
        seen.append(argv)
        return types.SimpleNamespace(stdout="", stderr="", returncode=1)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    for runtime in bench.runtimes_from_args(bench.build_parser().parse_args([])):
        bench.run_worker(runtime, "L1", [])
    sides = [argv[argv.index("--side") + 1] for argv in seen]
    assert sides == ["unpatched", "patched"]


def test_fx_cache_count_leaves_out_freed_code_queued_for_the_next_compile(
        bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = types.SimpleNamespace(
        eval_cache={"<eval_with_key>.0": "def forward(self): pass\n",
                    "<eval_with_key>.1": "def forward(self): return 1\n"},
        freed_keys=["<eval_with_key>.1"])
    graph_module = types.ModuleType("torch.fx.graph_module")
    graph_module._loader = loader
    fx = types.ModuleType("torch.fx")
    fx.graph_module = graph_module
    torch = types.ModuleType("torch")
    torch.fx = fx
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.fx", fx)
    monkeypatch.setitem(sys.modules, "torch.fx.graph_module", graph_module)
    monkeypatch.setattr(linecache, "cache", {key: (0, None, [], key) for key in loader.eval_cache})
    assert bench.fx_cache_sizes() == {
        "eval_cache_entries": 1, "eval_cache_chars": len("def forward(self): pass\n"),
        "linecache_entries": 1, "queued_entries": 1}
