"""Compatibility sweep: the Python protocols and Tensor methods users apply to fakes and modes.

    .venv/bin/python test/compat_sweep.py                     # patched (the overlay)
    PATCHSET_OVERLAY=0 .venv/bin/python test/compat_sweep.py  # unpatched 1.13.1
    .venv/bin/python test/compat_sweep.py --list              # the case names, one a line
    .venv/bin/python test/compat_sweep.py --start 12          # from the 13th case on

Prints a JSON header line (`{"fake_tensor": <file>, "cases": <count>}`), then one JSON line a
case, `{"case": name, "outcome": ...}`, where the outcome is normalized so that it does not
depend on addresses or ids:
  {"value": description}              the case returned (tensors: type, fake/Parameter-ness,
                                       dtype, shape, stride, device, requires_grad, is_leaf,
                                       grad_fn kind, view-ness, identity with the inputs)
  {"error": type name, "msg": prefix} the case raised (message: first line, addresses and
                                       numbers masked, cut at 60 characters)
and `"warnings"`: the sorted categories of the warnings it emitted. Every case makes its own
subjects: a fake from `from_tensor` of a plain tensor (`plain`), of an `nn.Parameter`
(`param`), of a view (`view`), of a leaf requiring grad (`grad`), of a non-leaf (`nonleaf`);
a fake made by a factory inside `with FakeTensorMode()` (`inmode`); a parameter of a module
deep-copied under `FakeCopyMode` (`modparam`); and the modes and modules themselves.

What it covers, on each kind of fake: copy.copy, copy.deepcopy (alone, of a list with aliases,
Tensor.__deepcopy__), vars of the copies, pickle.dumps, torch.save, __reduce_ex__, repr, str,
format, hash, weakref.ref (alive; dead after the last reference goes, with and without the
cyclic gc), vars, setting an attribute, dir (names added/removed against a plain tensor),
isinstance/type, the fake's own fields, numel/dim/size/len/nbytes/_version/_base, iteration,
`in`, bool, ==, detach, requires_grad_ (True, False, attribute), .grad (read, fake, real, None),
backward, register_hook, retain_grad, autograd.grad, .data (read, assign), storage, data_ptr,
type(), is_tensor, item (also with throw_on_data_dependent_ops), tolist, numpy, numpy.asarray,
float(), to(float64/"cpu"/"meta"), cpu(), clone (outside and inside the mode), contiguous,
new_empty/new_zeros/new_ones/new_full/new_tensor and empty_like/zeros_like (outside and inside
the mode), ops outside the mode and with real tensors, from_tensor again and by another mode.
Names 1.13.1 had that the series no longer uses: WeakTensorRefKey,
MetaConverter.maybe_storages_to_delete, proxy_tensor.proxy_slot, FakeTensorConverter.set_tensor_memo.
Modes: copy.copy, copy.deepcopy (alone, with a fake), pickle, repr, hash, weakref (and freed),
vars, dir, isinstance, in_kernel_invocation, `with` returning the mode, entering a mode twice,
nested distinct modes, fakes of two modes mixed, exit, re-entry, an exception inside.
FakeCopyMode: deep copy of a module, of aliased tensors, of a Parameter, of a fake, clone.
Modules with fake parameters: forward, backward, copy.copy, copy.deepcopy (also of a module
whose tensors were replaced by from_tensor fakes), pickle, torch.save of the state_dict,
state_dict, load_state_dict (real or fake, in the mode or not, fakes onto a real module), to,
to_empty, zero_grad, repr, named_parameters, stateless.functional_call with fake parameters.

test/test_compat_sweep.py runs it unpatched and patched and compares the outcomes case by case.
The process ends with os._exit: unpatched 1.13.1 can crash at interpreter shutdown.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import io
import json
import os
import pickle
import re
import sys
import warnings
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensor, FakeTensorMode

CASES: Dict[str, Callable[[], Any]] = {}
KINDS = ("plain", "param", "view", "grad", "nonleaf", "inmode", "modparam")


class Subject(NamedTuple):
    kind: str
    mode: FakeTensorMode
    real: Optional[torch.Tensor]  # what the fake was made from (None for `inmode`)
    fake: torch.Tensor


def subject(kind: str) -> Subject:
    mode = FakeTensorMode()
    real: Optional[torch.Tensor]
    if kind == "plain":
        real = torch.randn(2, 3)
    elif kind == "param":
        real = torch.nn.Parameter(torch.randn(2, 3))
    elif kind == "view":
        real = torch.randn(4, 3)[1:3]
    elif kind == "grad":
        real = torch.randn(2, 3, requires_grad=True)
    elif kind == "nonleaf":
        real = torch.randn(2, 3, requires_grad=True) * 2
    elif kind == "inmode":
        with mode:
            return Subject(kind, mode, None, torch.empty(2, 3))
    elif kind == "modparam":
        module = torch.nn.Linear(3, 2)
        with FakeCopyMode(mode):
            copied = copy.deepcopy(module)
        return Subject(kind, mode, module.weight, copied.weight)
    else:
        raise ValueError(kind)
    return Subject(kind, mode, real, mode.from_tensor(real))


def case(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return register


def per_kind(name: str) -> Callable[[Callable[[Subject], Any]], None]:
    """Register `name[kind]` for each kind: fn gets a fresh subject of that kind."""
    def register(fn: Callable[[Subject], Any]) -> None:
        for kind in KINDS:
            case(f"{name}[{kind}]")(lambda kind=kind: fn(subject(kind)))
    return register


# ---- normalized descriptions --------------------------------------------------------------------

ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def norm_text(text: str) -> str:
    return ADDRESS.sub("0x?", text)


def try_get(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # a field a fake cannot answer is part of its description
        return "error: " + type(e).__name__


def describe(value: Any, **refs: Any) -> Any:
    """A description of value without addresses; refs name objects it may be identical to."""
    if isinstance(value, torch.Tensor):
        d: Dict[str, Any] = {
            "type": type(value).__name__,
            "fake": isinstance(value, FakeTensor),
            "param": isinstance(value, torch.nn.Parameter),
            "dtype": str(value.dtype),
            "shape": list(value.shape),
            "stride": try_get(lambda: list(value.stride())),
            "offset": try_get(value.storage_offset),
            "device": try_get(lambda: str(value.device)),
            "requires_grad": value.requires_grad,
            "is_leaf": value.is_leaf,
            "grad_fn": None if value.grad_fn is None else type(value.grad_fn).__name__,
            "is_view": value._is_view(),
        }
        if isinstance(value, FakeTensor):
            d["mode"] = next((k for k, r in refs.items() if value.fake_mode is r), "other")
    elif isinstance(value, FakeTensorMode):
        d = {"type": type(value).__name__,
             "converter": type(value.fake_tensor_converter).__name__}
    elif isinstance(value, torch.nn.Module):
        return {"type": type(value).__name__,
                "state": {k: describe(v, **refs) for k, v in value.state_dict(keep_vars=True).items()}}
    elif isinstance(value, (list, tuple)):
        return [describe(v, **refs) for v in value]
    elif isinstance(value, dict):
        return {str(k): describe(v, **refs) for k, v in value.items()}
    elif isinstance(value, str):
        return norm_text(value)
    elif value is None or isinstance(value, (bool, int, float)):
        return value
    else:
        d = {"type": type(value).__name__}
    same = sorted(k for k, r in refs.items() if value is r)
    if same:
        d["is"] = same
    return d


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.storage()._cdata == b.storage()._cdata


def fake_desc(value: Any, s: Subject, **refs: Any) -> Any:
    return describe(value, input=s.fake, real=s.real, mode=s.mode, **refs)


def error_of(e: BaseException) -> Dict[str, str]:
    lines = str(e).strip().splitlines()
    msg = re.sub(r"\d+", "N", norm_text(lines[0] if lines else ""))
    return {"error": type(e).__name__, "msg": msg[:60]}


# ---- Python protocols ---------------------------------------------------------------------------

@per_kind("vars(copy.copy)")
def _(s):
    return sorted(vars(copy.copy(s.fake)))


@per_kind("vars(copy.deepcopy)")
def _(s):
    return sorted(vars(copy.deepcopy(s.fake)))


@per_kind("copy.deepcopy.shared")
def _(s):
    # aliasing within one deepcopy: the same fake twice and its view come out as one copy and a view
    a, b, v = copy.deepcopy([s.fake, s.fake, s.fake[0]])
    return {"same": a is b, "view_of_copy": v._base is a or v._base is a._base,
            "shared_storage": same_storage(a, v)}


@per_kind("pickle.dumps")
def _(s):
    return len(pickle.dumps(s.fake)) > 0


@per_kind("torch.save")
def _(s):
    torch.save(s.fake, io.BytesIO())
    return "saved"


@per_kind("__reduce_ex__")
def _(s):
    return type(s.fake.__reduce_ex__(2)).__name__


@per_kind("repr")
def _(s):
    return repr(s.fake)


@per_kind("str")
def _(s):
    return str(s.fake)


@per_kind("format")
def _(s):
    return f"{s.fake}" == str(s.fake)


@per_kind("hash")
def _(s):
    return {"stable": hash(s.fake) == hash(s.fake), "is_id": hash(s.fake) == id(s.fake),
            "dict_key": {s.fake: 1}[s.fake], "set": len({s.fake, s.fake})}


@per_kind("weakref.ref")
def _(s):
    ref = weakref.ref(s.fake)
    return {"alive": ref() is s.fake}


@per_kind("vars")
def _(s):
    return sorted(vars(s.fake))


@per_kind("__dict__.setattr")
def _(s):
    s.fake.note = 1
    return {"keys": sorted(s.fake.__dict__), "note": s.fake.note}


@per_kind("dir")
def _(s):
    names, base = set(dir(s.fake)), set(dir(torch.empty(0)))
    return {"added": sorted(names - base), "removed": sorted(base - names)}


@per_kind("isinstance")
def _(s):
    f = s.fake
    return {"type": type(f).__name__, "Tensor": isinstance(f, torch.Tensor),
            "FakeTensor": isinstance(f, FakeTensor), "Parameter": isinstance(f, torch.nn.Parameter),
            "type_is_FakeTensor": type(f) is FakeTensor}


@per_kind("fake_attrs")
def _(s):
    return {"mode_is_mode": s.fake.fake_mode is s.mode, "fake_device": str(s.fake.fake_device),
            "constant": s.fake.constant is None}


@per_kind("sizes")
def _(s):
    f = s.fake
    return {"numel": f.numel(), "dim": f.dim(), "size": list(f.size()), "shape": list(f.shape),
            "len": len(f), "contiguous": f.is_contiguous(), "element_size": f.element_size(),
            "nbytes": f.nbytes, "ndim": f.ndim, "is_cpu": f.is_cpu, "is_meta": f.is_meta,
            "_version": f._version,
            "base_is_fake": None if f._base is None else isinstance(f._base, FakeTensor)}


@per_kind("__contains__")
def _(s):
    return 0.0 in s.fake


@per_kind("__bool__")
def _(s):
    return bool(s.fake)


@per_kind("__eq__")
def _(s):
    with s.mode:
        return fake_desc(s.fake == s.fake, s)


@per_kind("bool(__eq__)")
def _(s):
    with s.mode:
        return bool((s.fake == s.fake).all())


# ---- Tensor methods -----------------------------------------------------------------------------

@per_kind("requires_grad=")
def _(s):
    s.fake.requires_grad = True
    return fake_desc(s.fake, s)


@per_kind(".grad=fake")
def _(s):
    g = s.mode.from_tensor(torch.ones(2, 3))
    s.fake.grad = g
    return fake_desc(s.fake.grad, s, grad=g)


@per_kind(".grad=real")
def _(s):
    g = torch.ones(2, 3)
    s.fake.grad = g
    return fake_desc(s.fake.grad, s, grad=g)


@per_kind(".grad=None")
def _(s):
    s.fake.grad = None
    return fake_desc(s.fake.grad, s)


@per_kind("backward")
def _(s):
    with s.mode:
        (s.fake * 2).sum().backward()
    return {"grad": fake_desc(s.fake.grad, s),
            "base_grad": None if s.fake._base is None else fake_desc(s.fake._base.grad, s)}


@per_kind("register_hook")
def _(s):
    seen = []
    handle = s.fake.register_hook(lambda g: seen.append(g))
    with s.mode:
        (s.fake * 2).sum().backward()
    handle.remove()
    return {"handle": type(handle).__name__, "seen": fake_desc(seen, s)}


@per_kind(".data=")
def _(s):
    new = s.mode.from_tensor(torch.zeros(3, 2))
    s.fake.data = new
    return fake_desc(s.fake, s, new=new)


@per_kind("storage")
def _(s):
    return type(s.fake.storage()).__name__


@per_kind("data_ptr")
def _(s):
    return s.fake.data_ptr()


@per_kind("type()")
def _(s):
    return s.fake.type()


@per_kind("is_tensor")
def _(s):
    return [torch.is_tensor(s.fake), torch.overrides.is_tensor_like(s.fake)]


@per_kind("retain_grad")
def _(s):
    s.fake.retain_grad()
    with s.mode:
        (s.fake * 2).sum().backward()
    return fake_desc(s.fake.grad, s)


@per_kind("autograd.grad")
def _(s):
    with s.mode:
        return fake_desc(torch.autograd.grad((s.fake * 2).sum(), [s.fake]), s)


@per_kind("numpy.asarray")
def _(s):
    import numpy
    return describe(numpy.asarray(s.fake).shape)


@per_kind("item")
def _(s):
    return s.fake.sum().item()


@per_kind("item(throw_on_data_dependent_ops)")
def _(s):
    s.mode.throw_on_data_dependent_ops = True
    return s.fake.sum().item()


@per_kind("tolist")
def _(s):
    return s.fake.tolist()


@per_kind("numpy")
def _(s):
    return describe(s.fake.detach().numpy())


@per_kind("float()")
def _(s):
    return float(s.fake[0, 0])


# cases that describe what one call on the fake returns (those of IN_MODE_TOO also inside the mode)
RETURNS: Dict[str, Callable[[Any], Any]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "describe": lambda f: f,
    "iter": lambda f: list(iter(f)),
    "detach": lambda f: f.detach(),
    "requires_grad_": lambda f: f.requires_grad_(),
    "requires_grad_(False)": lambda f: f.requires_grad_(False),
    ".grad": lambda f: f.grad,
    ".data": lambda f: f.data,
    "Tensor.__deepcopy__": lambda f: torch.Tensor.__deepcopy__(f, {}),
    "to(float64)": lambda f: f.to(torch.float64),
    "to(cpu)": lambda f: f.to("cpu"),
    "to(meta)": lambda f: f.to("meta"),
    "cpu()": lambda f: f.cpu(),
    "clone": lambda f: f.clone(),
    "contiguous": lambda f: f.contiguous(),
    "op outside mode": lambda f: f + 1,
    "from_tensor of fake by other mode": lambda f: FakeTensorMode().from_tensor(f),
    "new_empty": lambda f: f.new_empty((2, 2)),
    "new_zeros": lambda f: f.new_zeros((2, 2)),
    "new_ones": lambda f: f.new_ones((2, 2)),
    "new_full": lambda f: f.new_full((2, 2), 3.0),
    "new_tensor": lambda f: f.new_tensor([1.0, 2.0]),
    "empty_like": torch.empty_like,
    "zeros_like": torch.zeros_like,
}
IN_MODE_TOO = ("clone", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "empty_like",
               "zeros_like")


def in_mode(mode: FakeTensorMode, fn: Callable[[Any], Any], arg: Any) -> Any:
    with mode:
        return fn(arg)


for _name, _fn in RETURNS.items():
    per_kind(_name)(lambda s, fn=_fn: fake_desc(fn(s.fake), s))
for _name in IN_MODE_TOO:
    per_kind(_name + "(in mode)")(lambda s, fn=RETURNS[_name]: fake_desc(in_mode(s.mode, fn, s.fake), s))


@per_kind("op with real")
def _(s):
    with s.mode:
        return fake_desc(s.fake + torch.ones(2, 3), s)


@per_kind("from_tensor again")
def _(s):
    if s.real is None:
        return fake_desc(s.mode.from_tensor(s.fake), s)
    return fake_desc(s.mode.from_tensor(s.real), s)


# ---- modes --------------------------------------------------------------------------------------

def mode_and_fake():
    mode = FakeTensorMode()
    return mode, mode.from_tensor(torch.randn(2, 3))


@case("from_tensor.param_with_grad")
def _():
    mode, real = FakeTensorMode(), torch.nn.Parameter(torch.randn(2, 3))
    real.grad = torch.randn(2, 3)
    fake = mode.from_tensor(real)
    return {"fake": describe(fake, mode=mode), "grad": describe(fake.grad, mode=mode)}


@case("from_tensor.two_views_of_one_base")
def _():
    mode, base = FakeTensorMode(), torch.randn(4, 3)
    a, b = mode.from_tensor(base[1:]), mode.from_tensor(base[:2])
    with mode:
        a.add_(1)
    return {"same_base": a._base is b._base, "versions": [a._version, b._version]}


@case("mode.copy.copy")
def _():
    mode, fake = mode_and_fake()
    new = copy.copy(mode)
    return {"mode": describe(new, mode=mode),
            "converter_shared": new.fake_tensor_converter is mode.fake_tensor_converter}


@case("mode.copy.deepcopy")
def _():
    mode, fake = mode_and_fake()
    new = copy.deepcopy(mode)
    with new:
        out = torch.empty(2)
    return {"mode": describe(new, mode=mode), "fake_of_copy": describe(out, mode=mode, copy=new)}


@case("mode.deepcopy.with_fake")
def _():
    mode, fake = mode_and_fake()
    new_fake, new_mode = copy.deepcopy([fake, mode])
    return {"fake": describe(new_fake, mode=mode, new_mode=new_mode, input=fake),
            "mode": describe(new_mode, mode=mode)}


@case("mode.pickle.dumps")
def _():
    mode, fake = mode_and_fake()
    return len(pickle.dumps(mode)) > 0


@case("mode.repr")
def _():
    return repr(FakeTensorMode())


@case("mode.hash")
def _():
    mode = FakeTensorMode()
    return {mode: 1}[mode]


@case("mode.weakref")
def _():
    mode = FakeTensorMode()
    return weakref.ref(mode)() is mode


def freed(make: Callable[[], Any], collect: bool) -> Dict[str, bool]:
    """Whether what make() returns, once dropped, is freed by reference counting alone (the
    cyclic gc disabled meanwhile) or, with collect, by gc.collect()."""
    gc.disable()
    try:
        ref = weakref.ref(make())
        if collect:
            gc.collect()
        return {"dead": ref() is None}
    finally:
        gc.enable()


def used_mode() -> FakeTensorMode:
    mode, fake = mode_and_fake()
    with mode:
        (fake * 2).sum()
    return mode


# dropping the fake (with its real tensor and mode), or a mode that made fakes, frees it
for _collect, _suffix in ((True, ""), (False, "(no gc)")):
    for _kind in KINDS:
        case(f"weakref.dies{_suffix}[{_kind}]")(
            lambda kind=_kind, c=_collect: freed(lambda: subject(kind).fake, c))
    case(f"mode.weakref.dies{_suffix}")(lambda c=_collect: freed(used_mode, c))


@case("mode.vars")
def _():
    mode, fake = mode_and_fake()
    return sorted(vars(mode))


@case("mode.dir")
def _():
    return sorted(n for n in dir(FakeTensorMode()) if not n.startswith("__"))


@case("mode.isinstance")
def _():
    from torch.utils._python_dispatch import TorchDispatchMode
    return isinstance(FakeTensorMode(), TorchDispatchMode)


@case("mode.in_kernel_invocation")
def _():
    mode = FakeTensorMode()
    before = mode.in_kernel_invocation
    mode.in_kernel_invocation = True
    fake = mode.from_tensor(torch.randn(2))
    inside = str(fake.device)
    mode.in_kernel_invocation = False
    return {"before": before, "device_inside": inside, "device_after": str(fake.device)}


@case("mode.enter_returns_self")
def _():
    mode = FakeTensorMode()
    with mode as entered:
        return entered is mode


@case("mode.enter_twice")
def _():
    mode = FakeTensorMode()
    with mode:
        with mode:
            inner = torch.empty(2)
        outer = torch.empty(2)
    after = torch.empty(2)
    return describe([inner, outer, after], mode=mode)


@case("mode.enter_twice.from_tensor")
def _():
    mode = FakeTensorMode()
    real = torch.randn(2)
    with mode:
        with mode:
            inner = mode.from_tensor(real) * 2
        outer = inner + 1
    return describe([inner, outer], mode=mode)


@case("mode.nested_distinct")
def _():
    outer, inner = FakeTensorMode(), FakeTensorMode()
    with outer:
        with inner:
            a = torch.empty(2)
        b = torch.empty(2)
    return describe([a, b], outer=outer, inner=inner)


@case("mode.nested_distinct.mix")
def _():
    outer, inner = FakeTensorMode(), FakeTensorMode()
    with outer:
        a = torch.empty(2)
        with inner:
            return describe(a + 1, outer=outer, inner=inner)


@case("mode.mix_fakes_of_two_modes")
def _():
    a = FakeTensorMode().from_tensor(torch.randn(2))
    b = FakeTensorMode().from_tensor(torch.randn(2))
    return describe(a + b)


@case("mode.exit_restores")
def _():
    mode = FakeTensorMode()
    with mode:
        pass
    return describe(torch.empty(2), mode=mode)


@case("mode.reenter_after_exit")
def _():
    mode = FakeTensorMode()
    with mode:
        a = torch.empty(2)
    with mode:
        b = a * 2
    return describe([a, b], mode=mode)


@case("mode.exception_inside")
def _():
    mode = FakeTensorMode()
    with contextlib.suppress(ValueError):
        with mode:
            raise ValueError
    return describe(torch.empty(2), mode=mode)


# ---- names 1.13.1 had ----------------------------------------------------------------------------

@case("names.WeakTensorRefKey")
def _():
    from torch._subclasses import fake_tensor, meta_utils
    t = torch.randn(2)
    key = meta_utils.WeakTensorRefKey(t)
    return {"same_class": fake_tensor.WeakTensorRefKey is meta_utils.WeakTensorRefKey,
            "ten": key.ten() is t, "hash": hash(key) == id(t),
            "eq": key == meta_utils.WeakTensorRefKey(t)}


@case("names.MetaConverter.maybe_storages_to_delete")
def _():
    from torch._subclasses.meta_utils import MetaConverter
    return MetaConverter().maybe_storages_to_delete


@case("names.proxy_tensor.proxy_slot")
def _():
    from torch.fx.experimental import proxy_tensor
    return type(proxy_tensor.proxy_slot).__name__


@case("names.FakeTensorConverter.set_tensor_memo")
def _():
    mode = FakeTensorMode()
    converter = mode.fake_tensor_converter
    real = torch.randn(2)
    fake = converter.from_meta_and_device(mode, torch.empty(2, device="meta"), torch.device("cpu"))
    converter.set_tensor_memo(real, fake)
    return mode.from_tensor(real) is fake


# ---- modules and FakeCopyMode -------------------------------------------------------------------

def fake_module(mode: Optional[FakeTensorMode] = None):
    """(mode, a real module, its deep copy under FakeCopyMode(mode))"""
    mode = mode or FakeTensorMode()
    real = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    with FakeCopyMode(mode):
        return mode, real, copy.deepcopy(real)


def deepcopy_summary(mode: FakeTensorMode, module: torch.nn.Module) -> Dict[str, Any]:
    """Whether a deep copy of module is its fakes again (but for their mode), all of one mode."""
    old = module.state_dict(keep_vars=True)
    new = copy.deepcopy(module).state_dict(keep_vars=True)

    def strip(state):
        return {k: {f: v for f, v in describe(t).items() if f != "mode"} for k, t in state.items()}

    return {"as_original": strip(old) == strip(new),
            "modes": sorted({describe(t, mode=mode).get("mode", "real") for t in new.values()}),
            "one_mode": len({id(getattr(t, "fake_mode", None)) for t in new.values()}) == 1}


# cases that describe what one call returns on a module with fake parameters (fake), made by
# FakeCopyMode from a real module (real) for mode
ON_MODULE: Dict[str, Callable[[FakeTensorMode, torch.nn.Module, torch.nn.Module], Any]] = {
    "FakeCopyMode.deepcopy_module": lambda mode, real, fake: describe(fake, mode=mode),
    "module.copy.deepcopy": lambda mode, real, fake: deepcopy_summary(mode, fake),
    "module.pickle.dumps": lambda mode, real, fake: len(pickle.dumps(fake)) > 0,
    "module.state_dict": lambda mode, real, fake: describe(fake.state_dict(), mode=mode),
    "module.load_state_dict(real)": lambda mode, real, fake: str(fake.load_state_dict(real.state_dict())),
    "module.load_state_dict(fake onto real)":
        lambda mode, real, fake: str(real.load_state_dict(fake.state_dict())),
    "module.to(float64)": lambda mode, real, fake: describe(fake.to(torch.float64), mode=mode),
    "module.to_empty": lambda mode, real, fake: describe(fake.to_empty(device="cpu"), mode=mode),
    "module.repr": lambda mode, real, fake: repr(fake) == repr(real),
    "module.named_parameters": lambda mode, real, fake: [n for n, _ in fake.named_parameters()],
}
for _name, _fn in ON_MODULE.items():
    case(_name)(lambda fn=_fn: fn(*fake_module()))


@case("FakeCopyMode.deepcopy_tensors")
def _():
    mode = FakeTensorMode()
    base = torch.randn(4, 3)
    with FakeCopyMode(mode):
        a, b, v = copy.deepcopy([base, base, base[1:]])
    return {"a": describe(a, mode=mode), "same": a is b, "v": describe(v, mode=mode),
            "shared_storage": same_storage(a, v)}


@case("FakeCopyMode.deepcopy_param")
def _():
    mode = FakeTensorMode()
    with FakeCopyMode(mode):
        return describe(copy.deepcopy(torch.nn.Parameter(torch.randn(2))), mode=mode)


@case("FakeCopyMode.clone")
def _():
    mode = FakeTensorMode()
    with FakeCopyMode(mode):
        return describe(torch.randn(2).clone(), mode=mode)


@case("FakeCopyMode.deepcopy_fake")
def _():
    mode, fake = mode_and_fake()
    with FakeCopyMode(mode):
        return describe(copy.deepcopy(fake), mode=mode, input=fake)


@case("module.forward")
def _():
    mode, real, fake = fake_module()
    with mode:
        return describe(fake(torch.empty(5, 3)), mode=mode)


@case("module.forward_backward")
def _():
    mode, real, fake = fake_module()
    with mode:
        fake(torch.empty(5, 3)).sum().backward()
    return describe([p.grad for p in fake.parameters()], mode=mode)


@case("module.copy.copy")
def _():
    mode, real, fake = fake_module()
    new = copy.copy(fake)
    return {"module": describe(new, mode=mode), "same_weight": new[0].weight is fake[0].weight}


@case("module.copy.deepcopy(from_tensor params)")
def _():
    # the module's parameters and buffers replaced by their from_tensor fakes
    mode, module = FakeTensorMode(), fake_module()[1]
    for sub in module.modules():
        for tensors in (sub._parameters, sub._buffers):
            for name, t in tensors.items():
                tensors[name] = mode.from_tensor(t)
    return deepcopy_summary(mode, module)


@case("module.torch.save")
def _():
    mode, real, fake = fake_module()
    torch.save(fake.state_dict(), io.BytesIO())
    return "saved"


@case("module.load_state_dict(real, in mode)")
def _():
    mode, real, fake = fake_module()
    with mode:
        return str(fake.load_state_dict(real.state_dict()))


@case("module.load_state_dict(fake, in mode)")
def _():
    mode, real, fake = fake_module()
    _, _, other = fake_module(mode)
    with mode:
        result = str(other.load_state_dict(fake.state_dict()))
    return {"result": result, "module": describe(other, mode=mode)}


@case("module.zero_grad")
def _():
    mode, real, fake = fake_module()
    with mode:
        fake(torch.empty(5, 3)).sum().backward()
    fake.zero_grad()
    return describe([p.grad for p in fake.parameters()], mode=mode)


@case("module.functional_call")
def _():
    from torch.nn.utils import stateless
    mode, real, fake = fake_module()
    params = {n: mode.from_tensor(p) for n, p in real.named_parameters()}
    with mode:
        return describe(stateless.functional_call(real, params, (torch.empty(5, 3),)), mode=mode)


# ---- running ------------------------------------------------------------------------------------

def run_case(fn: Callable[[], Any]) -> Dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome: Dict[str, Any] = {"value": describe(fn())}
        except Exception as e:
            outcome = error_of(e)
    outcome["warnings"] = sorted({w.category.__name__ for w in caught})
    gc.collect()
    return outcome


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--start", type=int, default=0, help="skip the first N cases")
    args = parser.parse_args(argv)
    import torch._subclasses.fake_tensor as fake_tensor
    gc.collect()
    gc.freeze()  # what the imports made: the gc.collect() after each case then skips it
    if args.list:
        print("\n".join(CASES))
    else:
        print(json.dumps({"fake_tensor": fake_tensor.__file__, "cases": len(CASES)}), flush=True)
        for name in list(CASES)[args.start:]:
            print(json.dumps({"case": name, "outcome": run_case(CASES[name])}), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
