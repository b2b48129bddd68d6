"""The compatibility sweep (test/compat_sweep.py), unpatched and patched: users' protocols and
Tensor methods on fakes, modes and modules with fake parameters behave as in 1.13.1.

The script runs in subprocesses of the project venv, unpatched (PATCHSET_OVERLAY=0) and patched;
a side that crashes (unpatched 1.13.1 segfaults on some deep copies) is restarted after the case
it was running, which is recorded as `{"crash": returncode}`. Each case is one test item: its
patched outcome must be the unpatched one, or an error of the same type where unpatched raised
one (messages may differ), unless DELIBERATE lists the case with the reason of the difference
(then an error stays an error and, for the cases of DIFFERS_ONLY_IN, only the fields named may
differ); where 1.13.1 crashes, UNPATCHED_CRASHES says what patched must give instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

SWEEP = Path(__file__).resolve().parent / "compat_sweep.py"


def each(reason: str, *names: str) -> Dict[str, str]:
    return dict.fromkeys(names, reason)


VIEW = ("0024: the fake of a view is an autograd view of its base's fake (`_is_view()`, as the "
        "real view); 1.13.1 made a leaf that is no view")
NONLEAF = ("0025: the fake of a non-leaf has a grad_fn (Error in repr, later torch's "
           "DelayedError node) and is_leaf False; 1.13.1 made a leaf requiring grad")
NONLEAF_AUTOGRAD = ("0025: the fake of a non-leaf is a non-leaf, so it behaves as the real one "
                    "where autograd tells them apart: setting its requires_grad raises "
                    "RuntimeError, reading .grad warns (UserWarning); backward() through it "
                    "raises RuntimeError, as in later torch, since the real tensor's autograd "
                    "history is not converted (1.13.1's leaf fake took the gradient)")
KERNEL_INVOCATION = ("0012: `in_kernel_invocation` is per thread, a property over the "
                     "`_kernel_invocation` threading.local the mode holds (reading and setting it "
                     "work as in 1.13.1: case mode.in_kernel_invocation)")
PYTHON_OWNER = ("0004: a fake the converter memoizes holds `_python_owner` in its __dict__ (a "
                "weak reference to its real tensor that refers to the fake), so it stays owned by "
                "Python while the memo can hand it out; copies leave it out")
MEMOIZED_KINDS = ("plain", "param", "view", "grad", "nonleaf")
REMOVED = ("the series stores nothing this name could reach, so reading it raises an "
           "AttributeError naming what replaced it (REPLACED_BY) rather than finding nothing")
# removed names -> what the patched error message names (within its first 60 characters)
REPLACED_BY = {
    "names.MetaConverter.maybe_storages_to_delete": "check_for_expired_weak",
    "names.proxy_tensor.proxy_slot": "get_proxy_slot",
}

VIEW_CASES = ("describe[view]", "requires_grad_[view]", "requires_grad_(False)[view]",
              "requires_grad=[view]", ".data=[view]", "to(cpu)[view]", "cpu()[view]",
              "contiguous[view]", "from_tensor again[view]")
NONLEAF_CASES = ("describe[nonleaf]", "requires_grad_[nonleaf]", ".data=[nonleaf]",
                 "to(cpu)[nonleaf]", "cpu()[nonleaf]", "contiguous[nonleaf]",
                 "from_tensor again[nonleaf]", "from_tensor of fake by other mode[nonleaf]")

# case -> why patched differs from unpatched 1.13.1 (each entry must still be a difference)
DELIBERATE: Dict[str, str] = {
    **each(VIEW, *VIEW_CASES),
    "FakeCopyMode.deepcopy_tensors": VIEW + "; FakeCopyMode's deep copy of a view is from_tensor "
                                     "of the view, so an autograd view of its base's fake, "
                                     "sharing its storage as in 1.13.1",
    **each(NONLEAF, "repr[nonleaf]", "str[nonleaf]", *NONLEAF_CASES),
    **each(NONLEAF_AUTOGRAD, "requires_grad_(False)[nonleaf]", "requires_grad=[nonleaf]",
           ".grad[nonleaf]", ".grad=None[nonleaf]", "backward[nonleaf]",
           "register_hook[nonleaf]", "retain_grad[nonleaf]"),
    "from_tensor.two_views_of_one_base": ("0024: fakes of views of one base share the base "
                                          "fake's version counter, so one add_ makes both "
                                          "versions 1 as for the real views; 1.13.1 counted 2"),
    **each(KERNEL_INVOCATION, "mode.vars", "mode.dir"),
    **each(PYTHON_OWNER, *(f"{case}[{kind}]" for case in ("vars", "__dict__.setattr", "dir")
                           for kind in MEMOIZED_KINDS)),
    "names.WeakTensorRefKey": ("0003: no memo is keyed by WeakTensorRefKey any more; it works as "
                               "before and warns that it is deprecated (DeprecationWarning)"),
    **each(REMOVED, *REPLACED_BY),
}

# deliberate differences confined to these fields of the description: the rest must be the same
DIFFERS_ONLY_IN: Dict[str, Tuple[str, ...]] = {
    **dict.fromkeys(VIEW_CASES + ("FakeCopyMode.deepcopy_tensors",), ("is_view",)),
    **dict.fromkeys(NONLEAF_CASES, ("is_leaf", "grad_fn")),
}

# cases 1.13.1 crashes in -> (why, what patched must give: the patched outcome of the case named,
# or this outcome)
DOUBLE_FREE = ("1.13.1 segfaults: deep-copying the mode copies the StorageWeakRef keys of its "
               "MetaConverter's storage memo, and each weak reference is freed twice")
MODULE_COPIED = {"value": {"as_original": True, "modes": ["other"], "one_mode": True}, "warnings": []}
UNPATCHED_CRASHES: Dict[str, Tuple[str, Any]] = {
    "copy.deepcopy[modparam]": (DOUBLE_FREE, "copy.deepcopy[param]"),
    "copy.deepcopy.shared[modparam]": (DOUBLE_FREE, "copy.deepcopy.shared[param]"),
    "vars(copy.deepcopy)[modparam]": (DOUBLE_FREE, "vars(copy.deepcopy)[param]"),
    "Tensor.__deepcopy__[modparam]": (DOUBLE_FREE, "Tensor.__deepcopy__[param]"),
    "module.copy.deepcopy": (DOUBLE_FREE, MODULE_COPIED),
    "module.copy.deepcopy(from_tensor params)": (DOUBLE_FREE, MODULE_COPIED),
}


def case_names() -> List[str]:
    proc = subprocess.run([sys.executable, str(SWEEP), "--list"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [n for n in proc.stdout.split("\n") if n]


CASES = case_names()


def run_side(overlay: str) -> Dict[str, Any]:
    """The script's header and its outcomes by case, restarting it after a crash."""
    env = dict(os.environ, PATCHSET_OVERLAY=overlay)
    outcomes: Dict[str, Any] = {}
    header: Dict[str, Any] = {}
    while len(outcomes) < len(CASES):
        proc = subprocess.run([sys.executable, str(SWEEP), "--start", str(len(outcomes))], env=env,
                              capture_output=True, text=True, timeout=600)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert lines and "fake_tensor" in lines[0], proc.stderr[-2000:]
        header = lines[0]
        for line in lines[1:]:
            outcomes[line["case"]] = line["outcome"]
        if proc.returncode != 0 and len(outcomes) < len(CASES):
            outcomes[CASES[len(outcomes)]] = {"crash": proc.returncode}
        else:
            assert proc.returncode == 0, proc.stderr[-2000:]
    return {"fake_tensor": header["fake_tensor"], "outcomes": outcomes}


@pytest.fixture(scope="module")
def sides() -> Dict[str, Dict[str, Any]]:
    return {"unpatched": run_side("0"), "patched": run_side("1")}


def differs(unpatched: Dict[str, Any], patched: Dict[str, Any]) -> bool:
    """Whether patched is not unpatched's outcome: errors compare by type only."""
    if "error" in unpatched and "error" in patched:
        return (unpatched["error"], unpatched["warnings"]) != (patched["error"], patched["warnings"])
    return unpatched != patched


def without(outcome: Any, fields: Tuple[str, ...]) -> Any:
    """outcome without the keys named fields, at any depth."""
    if isinstance(outcome, dict):
        return {k: without(v, fields) for k, v in outcome.items() if k not in fields}
    if isinstance(outcome, list):
        return [without(v, fields) for v in outcome]
    return outcome


def test_sides_load_different_fake_tensor_modules(sides: Dict[str, Dict[str, Any]]) -> None:
    assert "/torch_overlay/" not in sides["unpatched"]["fake_tensor"]
    assert "/torch_overlay/" in sides["patched"]["fake_tensor"]


def test_both_sides_ran_every_case(sides: Dict[str, Dict[str, Any]]) -> None:
    for side in sides.values():
        assert list(side["outcomes"]) == CASES


def test_tables_name_cases() -> None:
    for name, (_, expected) in UNPATCHED_CRASHES.items():
        assert name in CASES and name not in DELIBERATE, name
        assert not isinstance(expected, str) or expected in CASES, expected
    assert set(DELIBERATE) <= set(CASES), set(DELIBERATE) - set(CASES)
    assert set(DIFFERS_ONLY_IN) <= set(DELIBERATE), set(DIFFERS_ONLY_IN) - set(DELIBERATE)


@pytest.mark.parametrize("name", CASES)
def test_case_as_unpatched(sides: Dict[str, Dict[str, Any]], name: str) -> None:
    unpatched = sides["unpatched"]["outcomes"][name]
    patched = sides["patched"]["outcomes"][name]
    assert "crash" not in patched, f"patched crashed: {patched}"
    if name in DELIBERATE:
        # a refusal stays a refusal; the rest of a description stays the same
        assert "error" not in unpatched or "error" in patched, f"{name}: patched {json.dumps(patched)}"
        fields = DIFFERS_ONLY_IN.get(name, ())
        assert not fields or not differs(without(unpatched, fields), without(patched, fields)), (
            f"{name}: beyond {fields}: unpatched {json.dumps(unpatched)}\n   patched {json.dumps(patched)}")
        return
    if name in UNPATCHED_CRASHES:
        assert "crash" in unpatched, f"{name}: 1.13.1 no longer crashes: {json.dumps(unpatched)}"
        expected = UNPATCHED_CRASHES[name][1]
        if isinstance(expected, str):
            expected = sides["patched"]["outcomes"][expected]
        assert patched == expected, (
            f"{name}: patched {json.dumps(patched)}\n  expected {json.dumps(expected)}")
        return
    assert not differs(unpatched, patched), (
        f"{name}: unpatched {json.dumps(unpatched)}\n   patched {json.dumps(patched)}")


@pytest.mark.parametrize("name", sorted(REPLACED_BY))
def test_removed_name_says_what_replaced_it(sides: Dict[str, Dict[str, Any]], name: str) -> None:
    patched = sides["patched"]["outcomes"][name]
    assert patched.get("error") == "AttributeError", json.dumps(patched)
    assert REPLACED_BY[name] in patched["msg"], json.dumps(patched)


@pytest.mark.parametrize("name", sorted(DELIBERATE))
def test_deliberate_difference_is_still_one(sides: Dict[str, Dict[str, Any]], name: str) -> None:
    assert name in CASES, f"DELIBERATE names no case {name!r}"
    unpatched = sides["unpatched"]["outcomes"][name]
    patched = sides["patched"]["outcomes"][name]
    assert differs(unpatched, patched), f"{name} is no longer a difference: {json.dumps(patched)}"
