"""Cross-reference of FakeTensorMode against real execution over 1.13.1's OpInfo database.

Not collected by pytest.  `patchset crossref` runs it; by hand:
    .venv/bin/python test/crossref.py [--ops kthvalue,take] [-k EXPR] [--quick]
For every op of torch.testing._internal.common_methods_invocations.op_db and its CPU sample
inputs (one dtype: float32, or the op's first supported one), the functional form and the
in-place and out= variants where the OpInfo has them run once for real and once under
FakeTensorMode(allow_fallback_kernels=True).  Each (op, variant, sample) is classified:
  same             the fake's outputs and mutated inputs have the real dtype, shape, stride,
                   storage offset, device, view-ness and aliasing (is an input / shares an
                   input's storage)
  silent mismatch  the fake returns, but something of the above differs
  real depends on mode
                   a silent mismatch whose real reference, run once more under a no-op
                   TorchDispatchMode, differs from the real run outside the mode and matches
                   the fake in every compared field: the fake always runs inside a mode, and
                   real execution itself takes another path there (1.13.1's max_pool1d
                   returns a view under any mode, a fresh tensor outside one)
  fallback refusal the fake raises a NotImplementedError or a FakeTensor exception out of
                   run_fallback_kernel itself: the fallback ran the kernel and refused its
                   result (an output aliasing an input, a kernel failing on the zero stand-ins)
  clear error      the fake raises a NotImplementedError or a FakeTensor exception elsewhere
  crash            the fake raises anything else, or the worker process dies
  skipped          the real run raises, or the inputs cannot be faked
and marked when it reached the fallback kernel, and when the fake inputs already differed from
the real ones before the op ran (a conversion difference, not the op's).
The "symbolic" variant runs the functional form on the inputs converted with a ShapeEnv and
run under the python dispatcher, as make_fx(..., tracing_mode="symbolic") does (fallback kernels
off, as there); symbolic sizes are compared by their values. (Its inputs are not made views: a
view converted with a ShapeEnv gets a leaf fake with the view's layout, patched or not.)
The "backward" variant (--backward, not in the default selection) takes the samples of ops that
support autograd with requires_grad=True and compares `autograd.grad` of every output that
requires grad (ones as grad_outputs) real vs fake: each gradient's dtype, shape, stride, offset,
view-ness and aliasing among the inputs and the other gradients; the fallback is marked per phase
(forward, backward).  Unpatched (PATCHSET_OVERLAY=0) and patched
(PATCHSET_OVERLAY=1) run as two workers of the same interpreter; the summary puts them side by
side and lists every silent mismatch, then the records whose real reference depends on the
mode, by op, variant and differing fields (--json: the records under "unpatched" and "patched",
those under "real_depends_on_mode").  Exit status 1 when the patched side has a silent
mismatch the unpatched side does not (with --fail-on-mismatch: any patched silent mismatch).
Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

MODE_DEPENDENT = "real depends on mode"
REFUSED = "fallback refusal"
CLASSES = ("same", "silent mismatch", MODE_DEPENDENT, REFUSED, "clear error", "crash", "skipped")
# set on an error that leaves run_fallback_kernel (count_fallbacks)
RAISED_BY_FALLBACK = "_crossref_raised_by_fallback"
# the entries of a strided tensor's describe() row, to name what differs
DESCRIBED = ("dtype", "shape", "stride", "storage_offset", "device", "is_view", "alias")
FORWARD_VARIANTS = ("functional", "inplace", "out", "symbolic")
BACKWARD = "backward"
VARIANTS = FORWARD_VARIANTS + (BACKWARD,)
QUICK_SAMPLES = 2
Record = Dict[str, Any]


# --------------------------------------------------------------------------------------------
# Worker: runs under the torch the interpreter loads.


def op_key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(op_db: Sequence[Any], names: Optional[List[str]], expr: Optional[str]) -> List[Any]:
    chosen = []
    for op in op_db:
        key = op_key(op)
        if names and op.name not in names and key not in names:
            continue
        if expr and expr not in key:
            continue
        chosen.append(op)
    return chosen


def pick_dtype(op: Any, variant: str = "functional") -> Any:
    import torch

    dtypes = op.supported_backward_dtypes("cpu") if variant == BACKWARD else op.supported_dtypes("cpu")
    if torch.float32 in dtypes:
        return torch.float32
    return sorted(dtypes, key=str)[0] if dtypes else None


def concrete(xs: Any) -> Any:
    """Ints for the sizes, strides or offset of a tensor, symbolic ones by their value."""
    import torch

    def value(x: Any) -> int:
        if isinstance(x, torch.SymIntNode):
            sym = x.get_pyobj()
            return int(sym.shape_env.size_hint(sym.expr))
        return x

    return [value(x) for x in xs] if isinstance(xs, (list, tuple)) else value(xs)


def describe(t: Any, inputs: Sequence[Any], names: Optional[Sequence[str]] = None) -> Any:
    """The metadata compared between real and fake, aliasing relative to the inputs (named
    `input <index>` unless `names` says otherwise)."""
    import torch

    if not isinstance(t, torch.Tensor):
        return ["value", type(t).__name__]
    if t.layout != torch.strided:
        return [str(t.layout), str(t.dtype), concrete(list(t.shape)), t.device.type]
    alias = "fresh"
    for index, inp in enumerate(inputs):
        name = names[index] if names is not None else f"input {index}"
        if t is inp:
            alias = f"is {name}"
            break
        if inp.layout == torch.strided and torch._C._storage_id(t) == torch._C._storage_id(inp):
            alias = f"shares storage of {name}"
            break
    return [str(t.dtype), concrete(list(t.shape)), concrete(list(t.stride())),
            concrete(t.storage_offset()), t.device.type, t._is_view(), alias]


def differing_fields(want: Sequence[Any], got: Sequence[Any], labels: Sequence[str]) -> List[str]:
    """`<label> <field>` for each entry of two describe() row lists that differs (the whole
    row, `<label> metadata`, when the rows are not both strided-tensor rows)."""
    fields: List[str] = []
    for label, w, g in zip(labels, want, got):
        if w == g:
            continue
        if len(w) == len(g) == len(DESCRIBED):
            fields += [f"{label} {name}" for name, a, b in zip(DESCRIBED, w, g) if a != b]
        else:
            fields.append(f"{label} metadata")
    if len(want) != len(got):
        fields.append("tensor count")
    return fields


def in_a_noop_mode(thunk: Any) -> Any:
    """thunk() run for real under a dispatch mode that only redispatches: where a fake runs,
    minus the fake (ATen takes other paths when a mode is active, e.g. isTensorSubclassLike)."""
    from torch.utils._python_dispatch import BaseTorchDispatchMode

    with BaseTorchDispatchMode():
        return thunk()


def flat_tensors(tree: Any) -> List[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def call_variant(op: Any, variant: str, sample: Any, outs: Any) -> Any:
    if variant in ("functional", "symbolic"):
        return op(sample.input, *sample.args, **sample.kwargs)
    if variant == "inplace":
        return op.inplace_variant(sample.input, *sample.args, **sample.kwargs)
    return op.op(sample.input, *sample.args, out=outs, **sample.kwargs)


def empty_outs(result: Any) -> Any:
    """out= arguments: empty tensors of the functional result's dtypes, which the op resizes."""
    import torch

    if isinstance(result, torch.Tensor):
        return torch.empty(0, dtype=result.dtype)
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        return tuple(torch.empty(0, dtype=r.dtype) for r in result)
    return None


def variants_of(op: Any, wanted: Sequence[str] = FORWARD_VARIANTS) -> List[str]:
    found = ["functional"]
    if op.inplace_variant is not None:
        found.append("inplace")
    if op.supports_out:
        found.append("out")
    found.append("symbolic")
    if op.supports_autograd:
        found.append(BACKWARD)
    return [variant for variant in found if variant in wanted]


# --------------------------------------------------------------------------------------------
# Backward: gradients of a sample's outputs with respect to its inputs, real and fake.


class NotDifferentiable(Exception):
    """The sample has no output or no input autograd can connect: nothing to compare."""


def differentiable(tensors: Sequence[Any]) -> List[Any]:
    """Tensors that require grad, each once (a sample may pass the same tensor twice)."""
    seen, found = set(), []
    for t in tensors:
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            found.append(t)
    return found


def check_differentiable(outputs: Sequence[Any], inputs: Sequence[Any]) -> None:
    if not inputs:
        raise NotDifferentiable("no input requires grad")
    if not outputs:
        raise NotDifferentiable("no output requires grad")


def sample_grads(op: Any, sample: Any, fallback: "FallbackLog", marks: Dict[str, int]) -> Tuple[List[Any], List[Any]]:
    """(inputs that require grad, their gradients) of `autograd.grad` of every output that
    requires grad, with ones as grad_outputs; `marks` gets the fallback count after the forward."""
    import torch

    inputs = differentiable(flat_tensors((sample.input, sample.args, sample.kwargs)))
    outputs = differentiable(flat_tensors(op(sample.input, *sample.args, **sample.kwargs)))
    marks["forward"] = len(fallback)
    check_differentiable(outputs, inputs)
    grads = torch.autograd.grad(outputs, inputs, [torch.ones_like(o) for o in outputs], allow_unused=True)
    return inputs, list(grads)


def describe_grads(grads: Sequence[Any], inputs: Sequence[Any]) -> List[Any]:
    """Each gradient's metadata, aliasing relative to the inputs and the gradients before it."""
    rows: List[Any] = []
    for index, grad in enumerate(grads):
        if grad is None:
            rows.append(["no grad"])
            continue
        earlier = [(f"grad {j}", g) for j, g in enumerate(grads[:index]) if g is not None]
        pool = list(inputs) + [g for _, g in earlier]
        names = [f"input {j}" for j in range(len(inputs))] + [name for name, _ in earlier]
        rows.append(describe(grad, pool, names))
    return rows


def run_backward_case(op: Any, sample_index: int, sample: Any, fallback: "FallbackLog") -> Record:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    record: Record = {"op": op_key(op), "variant": BACKWARD, "sample": sample_index,
                      "fallback": False, "fallback_forward": False, "fallback_backward": False,
                      "detail": ""}
    try:
        mode = FakeTensorMode(allow_fallback_kernels=True)
        fake_sample = sample.transform(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t)
        real_inputs, real_grads = sample_grads(op, sample, fallback, {})
        fake_inputs = differentiable(flat_tensors((fake_sample.input, fake_sample.args, fake_sample.kwargs)))
        record["conversion"] = [describe(t, real_inputs) for t in real_inputs] != \
            [describe(t, fake_inputs) for t in fake_inputs]
    except Exception as error:  # the real run or the conversion: nothing to compare
        return {**record, "class": "skipped", "detail": f"{type(error).__name__}: {error}"[:200]}
    marks = {"start": len(fallback)}
    try:
        with mode:
            _, fake_grads = sample_grads(op, fake_sample, fallback, marks)
    except Exception as error:
        return {**record, "class": error_class(error), **fallback_marks(fallback, marks),
                "detail": f"{type(error).__name__}: {str(error).splitlines()[-1] if str(error) else ''}"[:300]}
    record.update(fallback_marks(fallback, marks))
    want, got = describe_grads(real_grads, real_inputs), describe_grads(fake_grads, fake_inputs)
    if want == got:
        return {**record, "class": "same"}
    diffs = [f"grad {i}: real {w} fake {g}" for i, (w, g) in enumerate(zip(want, got)) if w != g]
    if len(want) != len(got):
        diffs.append(f"{len(want)} grads real, {len(got)} fake")
    record.update(detail="; ".join(diffs)[:600],
                  fields=differing_fields(want, got, [f"grad {i}" for i in range(len(want))]))

    def in_mode() -> List[Any]:
        inputs, grads = in_a_noop_mode(lambda: sample_grads(op, sample, FallbackLog(), {}))
        return describe_grads(grads, inputs)

    return {**record, "class": mismatch_class(want, got, in_mode)}


def mismatch_class(want: Any, got: Any, real_in_mode: Any) -> str:
    """The class of a record whose fake (`got`) differs from the real run (`want`): MODE_DEPENDENT
    when the real reference rerun under a no-op dispatch mode (`real_in_mode()`, the same rows)
    differs from the run outside it and equals the fake, else a silent mismatch."""
    try:
        want_in_mode = real_in_mode()
    except Exception:  # the rerun cannot say anything: keep the mismatch
        return "silent mismatch"
    return MODE_DEPENDENT if want_in_mode != want and want_in_mode == got else "silent mismatch"


def fallback_marks(fallback: "FallbackLog", marks: Dict[str, int]) -> Record:
    """Which phase reached run_fallback_kernel: the forward, the backward (after the forward's
    mark; a forward that raised has no mark and counts whole), and the overloads."""
    start, end = marks["start"], len(fallback)
    forward_end = marks.get("forward", end)
    return {"fallback": end > start, "fallback_forward": forward_end > start,
            "fallback_backward": end > forward_end, "fallback_ops": fallback.since(start)}


def is_clear_error(error: BaseException) -> bool:
    from torch._subclasses import fake_tensor

    return isinstance(error, (
        NotImplementedError,
        fake_tensor.UnsupportedFakeTensorException,
        fake_tensor.DynamicOutputShapeException,
        fake_tensor.DataDependentOutputException,
    ))


def error_class(error: BaseException) -> str:
    if not is_clear_error(error):
        return "crash"
    return REFUSED if getattr(error, RAISED_BY_FALLBACK, False) else "clear error"


def run_case(op: Any, variant: str, sample_index: int, sample: Any, fallback: "FallbackLog") -> Record:
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    record: Record = {"op": op_key(op), "variant": variant, "sample": sample_index,
                      "fallback": False, "detail": ""}
    outs = None
    dispatcher: Any = contextlib.nullcontext()
    try:
        if variant == "out":
            outs = empty_outs(call_variant(op, "functional", sample, None))
            if outs is None:
                return {**record, "class": "skipped", "detail": "no tensor outputs for out="}
        if variant == "symbolic":
            from torch._dispatch.python import enable_python_dispatcher
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            shape_env = ShapeEnv()
            mode = FakeTensorMode(allow_fallback_kernels=False)
            dispatcher = enable_python_dispatcher()
            to_fake = lambda t: (  # noqa: E731
                mode.from_tensor(t, shape_env=shape_env) if isinstance(t, torch.Tensor) else t)
        else:
            mode = FakeTensorMode(allow_fallback_kernels=True)
            to_fake = lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
        fake_sample = sample.transform(to_fake) if hasattr(sample, "transform") else None
        fake_outs = tree_map(to_fake, outs)
        rerun_sample = pristine_copy(sample) if variant == "inplace" else sample
        real_inputs = flat_tensors((sample.input, sample.args, sample.kwargs, outs))
        fake_inputs = flat_tensors((fake_sample.input, fake_sample.args, fake_sample.kwargs, fake_outs))
        # a difference already there before the op is the conversion's, not the op's
        record["conversion"] = [describe(t, real_inputs) for t in real_inputs] != \
            [describe(t, fake_inputs) for t in fake_inputs]
        real = call_variant(op, variant, sample, outs)
    except Exception as error:  # the real run or the conversion: nothing to compare
        return {**record, "class": "skipped", "detail": f"{type(error).__name__}: {error}"[:200]}
    before = len(fallback)
    try:
        with mode, dispatcher:
            fake = call_variant(op, variant, fake_sample, fake_outs)
    except Exception as error:
        return {**record, "class": error_class(error), "fallback": len(fallback) > before,
                "fallback_ops": fallback.since(before),
                "detail": f"{type(error).__name__}: {str(error).splitlines()[-1] if str(error) else ''}"[:300]}
    record["fallback"] = len(fallback) > before
    record["fallback_ops"] = fallback.since(before)
    want = [describe(t, real_inputs) for t in flat_tensors(real)] + \
        [describe(t, real_inputs) for t in real_inputs]
    got = [describe(t, fake_inputs) for t in flat_tensors(fake)] + \
        [describe(t, fake_inputs) for t in fake_inputs]
    if want == got:
        return {**record, "class": "same"}
    n_out = len(flat_tensors(real))
    labels = [f"output {i}" for i in range(n_out)] + [f"input {i}" for i in range(len(real_inputs))]
    diffs = [f"{label}: real {w} fake {g}" for label, w, g in zip(labels, want, got) if w != g]
    if len(want) != len(got):
        diffs.append(f"{len(want)} tensors real, {len(got)} fake")
    record.update(detail="; ".join(diffs)[:600], fields=differing_fields(want, got, labels))

    def in_mode() -> List[Any]:
        if rerun_sample is None:
            raise RuntimeError("no unmutated copy of the sample")
        rerun_outs = empty_outs(outs)
        inputs = flat_tensors((rerun_sample.input, rerun_sample.args, rerun_sample.kwargs, rerun_outs))
        result = in_a_noop_mode(lambda: call_variant(op, variant, rerun_sample, rerun_outs))
        return [describe(t, inputs) for t in flat_tensors(result)] + [describe(t, inputs) for t in inputs]

    return {**record, "class": mismatch_class(want, got, in_mode)}


def pristine_copy(sample: Any) -> Any:
    """A deep copy of a sample an in-place run will change, for the rerun under a mode (same
    sizes, strides, offsets and shared storages; None when the sample cannot be copied)."""
    import copy

    try:
        return copy.deepcopy(sample)
    except Exception:
        return None


class FallbackLog(list):
    """The ops that reached run_fallback_kernel, in call order (len() is the call count)."""

    def since(self, start: int) -> List[str]:
        return sorted(set(self[start:]))


def count_fallbacks() -> FallbackLog:
    """Record calls of run_fallback_kernel (the mode looks it up in the module at each call)."""
    import torch._subclasses.fake_tensor as fake_tensor

    counter = FallbackLog()
    original = fake_tensor.run_fallback_kernel

    def counting(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        counter.append(str(func))
        try:
            return original(fake_mode, func, *args, **kwargs)
        except Exception as error:
            setattr(error, RAISED_BY_FALLBACK, True)
            raise

    fake_tensor.run_fallback_kernel = counting
    return counter


def worker(args: argparse.Namespace) -> int:
    import importlib
    import warnings

    if args.preload:
        # an import hook that must be in place before torch is imported
        importlib.import_module(args.preload)

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.filterwarnings("ignore")
    torch.set_default_dtype(torch.float32)
    fallback = count_fallbacks()
    names = args.ops.split(",") if args.ops else None
    ops = select_ops(op_db, names, args.k)[args.skip:]
    for number, op in enumerate(ops, start=args.skip + 1):
        print(json.dumps({"start": op_key(op)}), flush=True)
        print(f"[{args.label} {number}/{args.skip + len(ops)}] {op_key(op)}", file=sys.stderr, flush=True)
        for variant in variants_of(op, args.variants):
            dtype = pick_dtype(op, variant)
            if dtype is None:
                continue
            # fresh samples per variant: in-place and out= runs change them
            torch.manual_seed(0)
            try:
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=variant == BACKWARD))
            except Exception:
                continue
            for index, sample in enumerate(samples[:QUICK_SAMPLES] if args.quick else samples):
                if variant == BACKWARD:
                    record = run_backward_case(op, index, sample, fallback)
                else:
                    record = run_case(op, variant, index, sample, fallback)
                print(json.dumps(record), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Driver: both runtimes, summary.


Side = Dict[str, Any]  # {"python": path, "env": {...}, "preload": module or None}


def default_sides() -> Dict[str, Side]:
    """The interpreter running this script, with its overlay import hook off and on."""
    return {label: {"python": sys.executable, "env": {"PATCHSET_OVERLAY": overlay}, "preload": None}
            for label, overlay in (("unpatched", "0"), ("patched", "1"))}


def worker_argv(args: argparse.Namespace, label: str, skip: int, side: Side) -> List[str]:
    argv = [side["python"], os.path.abspath(__file__), "--worker", "--label", label, "--skip", str(skip)]
    if side.get("preload"):
        argv += ["--preload", side["preload"]]
    if args.ops:
        argv += ["--ops", args.ops]
    if args.k:
        argv += ["-k", args.k]
    if args.quick:
        argv.append("--quick")
    argv += ["--variants", ",".join(args.variants)]
    return argv


def run_side(args: argparse.Namespace, label: str, side: Side) -> List[Record]:
    """All records of one runtime; a worker that dies marks its op as a crash and restarts after it."""
    records: List[Record] = []
    skip = 0
    env = {**os.environ, **side["env"]}
    while True:
        proc = subprocess.Popen(worker_argv(args, label, skip, side), stdout=subprocess.PIPE, env=env,
                                text=True)
        assert proc.stdout is not None
        current = None
        started = 0
        for line in proc.stdout:
            if not line.startswith("{"):
                # what torch itself prints (e.g. common_utils without hypothesis): not a record
                sys.stderr.write(line)
                continue
            item = json.loads(line)
            if "start" in item:
                current, started = item["start"], started + 1
            else:
                records.append(item)
        if proc.wait() == 0:
            return records
        if current is None:
            raise SystemExit(f"crossref: the {label} worker failed before its first op")
        records.append({"op": current, "variant": "?", "sample": -1, "class": "crash",
                        "fallback": False, "detail": f"worker died with status {proc.returncode}"})
        skip += started


def summary_rows(records: List[Record]) -> Dict[str, Dict[str, int]]:
    rows: Dict[str, Dict[str, int]] = {}
    for r in records:
        row = rows.setdefault(r["variant"], {c: 0 for c in CLASSES + ("fallback",)})
        row[r["class"]] += 1
        row["fallback"] += int(r["fallback"])
    return rows


def print_summary(sides: Dict[str, List[Record]]) -> None:
    rows = {label: summary_rows(records) for label, records in sides.items()}
    heads = ["same", "mismatch", "real dep. on mode", "fallback refused", "clear err", "crash", "skipped",
             "via fallback"]
    print("\n| variant | side | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for variant in VARIANTS + ("?",):
        for label in sides:
            row = rows[label].get(variant)
            if row is not None:
                cells = [str(row[c]) for c in CLASSES] + [str(row["fallback"])]
                print(f"| {variant} | {label} | " + " | ".join(cells) + " |")
    for label, records in sides.items():
        phases = backward_fallback_phases(records)
        if phases is not None:
            print(f"\n{BACKWARD} records via fallback, {label}: in the forward {phases[0]}, "
                  f"in the backward {phases[1]}")


def backward_fallback_phases(records: List[Record]) -> Optional[Tuple[int, int]]:
    """(records whose forward, records whose backward reached the fallback); None without
    backward records."""
    backward = [r for r in records if r["variant"] == BACKWARD]
    if not backward:
        return None
    return (sum(bool(r.get("fallback_forward")) for r in backward),
            sum(bool(r.get("fallback_backward")) for r in backward))


def mismatch_keys(records: List[Record]) -> Dict[Tuple[str, str, int], Record]:
    return {(r["op"], r["variant"], r["sample"]): r for r in records if r["class"] == "silent mismatch"}


def mode_dependent(records: List[Record]) -> List[Record]:
    """(op, variant, sample, fields) of each record whose real reference depends on the mode."""
    return [{key: r[key] for key in ("op", "variant", "sample", "fields")}
            for r in records if r["class"] == MODE_DEPENDENT]


def sample_ranges(samples: Sequence[int]) -> str:
    """`0-3, 7` for [0, 1, 2, 3, 7]."""
    spans: List[List[int]] = []
    for n in sorted(samples):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def print_mode_dependent(label: str, records: List[Record]) -> None:
    found = mode_dependent(records)
    print(f"\nreal depends on the dispatch mode, {label}: {len(found)} (real outside a mode differs "
          "from real under a no-op mode, and the fake, which runs under one, matches the latter)")
    groups: Dict[Tuple[str, str, str], List[int]] = {}
    for r in found:
        groups.setdefault((r["op"], r["variant"], ", ".join(r["fields"])), []).append(r["sample"])
    for (op, variant, fields), samples in sorted(groups.items()):
        print(f"  {op} {variant} [{fields}]: {len(samples)}, samples {sample_ranges(samples)}")


def report(sides: Dict[str, List[Record]], fail_on_any: bool) -> int:
    print_summary(sides)
    before, after = mismatch_keys(sides["unpatched"]), mismatch_keys(sides["patched"])
    for label, found in (("unpatched", before), ("patched", after)):
        print(f"\nsilent mismatches, {label}: {len(found)}")
        for (op, variant, sample), r in sorted(found.items()):
            tag = "" if label == "unpatched" else (" (also unpatched)" if (op, variant, sample) in before else " (NEW)")
            via = (" [fallback]" if r["fallback"] else "") + \
                (" [inputs differ after conversion]" if r.get("conversion") else "")
            print(f"  {op} {variant} sample {sample}{via}{tag}: {r['detail']}")
    for label, records in sides.items():
        print_mode_dependent(label, records)
    new = [key for key in after if key not in before]
    if new:
        print(f"\ncrossref: FAIL: {len(new)} silent mismatch(es) on the patched side only")
        return 1
    if fail_on_any and after:
        print(f"\ncrossref: FAIL: {len(after)} silent mismatch(es) on the patched side")
        return 1
    print("\ncrossref: OK")
    return 0


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", help="comma-separated op names (or name.variant_test_name)")
    parser.add_argument("-k", help="only ops whose name contains this string")
    parser.add_argument("--quick", action="store_true", help=f"first {QUICK_SAMPLES} samples per op and variant")
    parser.add_argument("--fail-on-mismatch", action="store_true",
                        help="exit 1 on any patched silent mismatch, not only new ones")
    parser.add_argument("--json", help="also write all records to this file")
    parser.add_argument("--sides", help="JSON file: for 'unpatched' and 'patched', the python, env and "
                        "preload module of its workers (default: this interpreter, PATCHSET_OVERLAY=0/1)")
    parser.add_argument("--variants", type=variant_list, default=FORWARD_VARIANTS,
                        help=f"comma-separated, of {', '.join(VARIANTS)} (default: {','.join(FORWARD_VARIANTS)})")
    parser.add_argument("--backward", action="store_true",
                        help=f"the {BACKWARD} variant only (same as --variants {BACKWARD}): autograd.grad of "
                        "each sample's outputs, real vs fake, every gradient compared")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--preload", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="", help=argparse.SUPPRESS)
    parser.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.backward:
        args.variants = (BACKWARD,)
    return args


def variant_list(text: str) -> Tuple[str, ...]:
    """argparse type of --variants: known names, in VARIANTS order, at least one."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(VARIANTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(VARIANTS)}")
    return tuple(name for name in VARIANTS if name in names)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    if args.sides:
        with open(args.sides) as f:
            specs = json.load(f)
    else:
        specs = default_sides()
    sides = {label: run_side(args, label, specs[label]) for label in ("unpatched", "patched")}
    if not any(sides.values()):
        print("crossref: no op matched", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**sides, "real_depends_on_mode": {label: mode_dependent(records)
                                                         for label, records in sides.items()}},
                      f, indent=1)
    return report(sides, args.fail_on_mismatch)


if __name__ == "__main__":
    sys.exit(main())
