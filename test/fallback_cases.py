"""Before/after table of FakeTensorMode's fallback-kernel cases (not collected by pytest).

Runs every case under unpatched and patched torch, side by side, each in its own process:
    .venv/bin/python test/fallback_cases.py [--python-unpatched PY] [--python-patched PY]
The patched side is the project .venv with the overlay active; the unpatched side is the same
interpreter with PATCHSET_OVERLAY=0.  The README's fallback table comes from this script.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CASES = [
    ("mutate_", "returns its mutated input"),
    ("pair", "returns (input, fresh)"),
    ("nested", "returns [input, fresh, view of input]"),
    ("narrow_view", "returns a narrow view of its input"),
    ("transpose_view", "returns a transpose of its input"),
    ("second_view", "returns a view of its second input"),
    ("dtype_view", "returns a dtype view of its input"),
    ("dtype_view_version", "dtype view: version counter shared with x? (real: yes, no _base)"),
    ("strided_input_view", "narrow view of a non-contiguous, offset fake"),
    ("not_a_view", "returns a storage-sharing non-view reading past its input (real: the storage grows)"),
    ("view_base", "narrow view: autograd view of the input fake?"),
    ("min_out", "kernel torch.min(x (5, 6), 1, out=(v, i)), v and i empty"),
    ("column_out", "kernel writes x[:, 0] of x (4, 3) into out=o, o empty"),
    ("normalized", "kernel x / x.sum(), raising when the sum is 0 (zero-filled stand-ins are)"),
    ("raw_strided", "kernel x.as_strided((2, 2), (1, 2), 1) on x = base[1:, 1:3] (real: offset 1)"),
    ("aliased_inputs", "kernel sees its two inputs x, x[1:] alias"),
    ("known_output", "kernel returns a global the mode converted before"),
    ("complex_view", "kernel view_as_real of a non-contiguous complex input"),
    ("item", "kernel int((x > 0).sum()) (op not tagged data_dependent_output), throw_on_data_dependent_ops=True"),
    ("is_set_to", "x.is_set_to(x), x.is_set_to(y) (real: True, False)"),
    ("resize_input", "kernel resizes x, which its schema does not mark as written"),
]


def run_cases() -> dict:
    """Worker: run every case under the torch this interpreter loads; print JSON."""
    import torch
    import torch._subclasses.fake_tensor as fake_tensor
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    lib = torch.library.Library("fallback_cases", "DEF")
    kernels = {
        "mutate_": ("mutate_(Tensor(a!) x) -> Tensor(a!)", lambda x: x.add_(1)),
        "pair": ("pair(Tensor(a!) x) -> (Tensor(a!), Tensor)", lambda x: (x, x * 2)),
        "nested": ("nested(Tensor(a!) x) -> Tensor[]", lambda x: [x, x + 1, x[0]]),
        "narrow_view": ("narrow_view(Tensor(a) x) -> Tensor(a)", lambda x: x.narrow(0, 1, 2)),
        "transpose_view": ("transpose_view(Tensor(a) x) -> Tensor(a)", lambda x: x.t()),
        "second_view": ("second_view(Tensor x, Tensor(a) y) -> Tensor(a)", lambda x, y: y[1]),
        "dtype_view": ("dtype_view(Tensor(a) x) -> Tensor(a)", lambda x: x.view(torch.int32)),
        "not_a_view": (
            "not_a_view(Tensor(a) x) -> Tensor(a)",
            lambda x: torch.empty(0).set_(x.storage(), 0, (x.numel() + 1,), (1,)),
        ),
    }
    known = torch.randn(3, 2)

    def normalized(x):
        # fails on the values: zero-filled stand-ins are an invalid input
        total = x.sum()
        if total == 0:
            raise RuntimeError("normalized: the values sum to zero")
        return x / total

    kernels.update({
        "raw_strided": ("raw_strided(Tensor(a) x) -> Tensor(a)",
                        lambda x: x.as_strided((2, 2), (1, 2), 1)),
        "aliased": ("aliased(Tensor x, Tensor y) -> Tensor", lambda x, y: x.new_empty(
            int(x.storage().data_ptr() == y.storage().data_ptr()))),
        "known_output": ("known_output(Tensor x) -> Tensor", lambda x: known),
        "as_real": ("as_real(Tensor(a) x) -> Tensor(a)", lambda x: torch.view_as_real(x)),
        "positives": ("positives(Tensor x) -> int", lambda x: int((x > 0).sum())),
        "min_out": ("min_out(Tensor x, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!), Tensor(b!))",
                    lambda x, values, indices: torch.min(x, 1, out=(values, indices))),
        "column_out": ("column_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
                       lambda x, out: out.resize_(x.size(0)).copy_(x[:, 0])),
        "resize_input": ("resize_input(Tensor x) -> Tensor", lambda x: x.resize_(2, 2) + 1),
        "normalized": ("normalized(Tensor x) -> Tensor", normalized),
    })
    for name, (schema, kernel) in kernels.items():
        lib.define(schema)
        lib.impl(name, kernel, "CPU")
    ops = torch.ops.fallback_cases

    def describe(out, x, y):
        if out is x:
            return "input fake (identity)"
        if isinstance(out, (list, tuple)):
            return "[" + ", ".join(describe(o, x, y) for o in out) + "]"
        if isinstance(out, FakeTensor):
            for name, inp in (("x", x), ("y", y)):
                if torch._C._storage_id(out) == torch._C._storage_id(inp):
                    kind = "fake view" if out._is_view() else "fake on the storage"
                    return f"{kind} of {name} {tuple(out.shape)}"
            return f"fresh fake on {out.device}"
        return type(out).__name__

    results = {}
    for name, _ in CASES:
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.randn(4, 3))
        y = mode.from_tensor(torch.randn(3, 5))
        try:
            with mode:
                if name == "strided_input_view":
                    strided = x[1:, ::2]
                    out = ops.narrow_view(strided)
                    ref = strided.narrow(0, 1, 2)
                    same = (out.stride(), out.storage_offset()) == (ref.stride(), ref.storage_offset())
                    results[name] = f"view, layout {'matches' if same else 'DIFFERS'}"
                    continue
                special = SPECIAL.get(name)
                if special is not None:
                    results[name] = special(torch, mode, ops, x, known)
                    continue
                args = (x, y) if name == "second_view" else (x,)
                results[name] = describe(getattr(ops, name)(*args), x, y)
        except NotImplementedError as exc:
            results[name] = describe_error(exc)
    return {"file": fake_tensor.__file__, "results": results}


def describe_error(exc):
    says = "names the op" if "FakeTensor fallback for" in str(exc) else "bare"
    cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "none"
    return f"{type(exc).__name__} ({says}, __cause__ {cause})"


def case_view_base(torch, mode, ops, x, known):
    out = ops.narrow_view(x)
    return f"_is_view() {out._is_view()}, _base is x: {out._base is x}"


def case_dtype_view_version(torch, mode, ops, x, known):
    out = ops.dtype_view(x)
    before = out._version
    x.add_(0)
    shared = "yes" if out._version != before else "no"
    return f"{shared}, _base {'x' if out._base is x else out._base}"


def case_min_out(torch, mode, ops, x, known):
    v, i = torch.empty(0), torch.empty(0, dtype=torch.long)
    ops.min_out(torch.empty(5, 6), values=v, indices=i)
    return f"v {tuple(v.shape)}, i {tuple(i.shape)} (real (5,), (5,))"


def case_column_out(torch, mode, ops, x, known):
    o = torch.empty(0)
    ops.column_out(x, out=o)
    return f"o {tuple(o.shape)} (real (4,))"


def case_normalized(torch, mode, ops, x, known):
    try:
        ops.normalized(torch.rand(3, 5))
    except Exception as exc:
        says = "names zero-filled stand-ins" if "zero-filled stand-ins" in str(exc) else "bare"
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "none"
        return f"{type(exc).__name__} ({says}, __cause__ {cause})"
    return "no error"


def case_raw_strided(torch, mode, ops, x, known):
    out = ops.raw_strided(torch.empty(6, 4)[1:, 1:3])
    return f"storage offset {out.storage_offset()}"


def case_aliased_inputs(torch, mode, ops, x, known):
    return "yes" if ops.aliased(x, x[1:]).shape == (1,) else "no (real: yes)"


def case_known_output(torch, mode, ops, x, known):
    memoized = mode.from_tensor(known)
    return "its memoized fake" if ops.known_output(x) is memoized else "a new fake"


def case_complex_view(torch, mode, ops, x, known):
    c = torch.empty(4, 6, dtype=torch.complex64)[:, 1:5:2]
    try:
        out, ref = ops.as_real(c), torch.view_as_real(c)
    except NotImplementedError as exc:
        return describe_error(exc)
    same = (out.shape, out.stride(), out.storage_offset()) == (ref.shape, ref.stride(), ref.storage_offset())
    return f"view, layout {'matches torch.view_as_real' if same else 'DIFFERS'}"


def case_item(torch, mode, ops, x, known):
    mode.throw_on_data_dependent_ops = True
    try:
        return f"{ops.positives(x)!r}, silently"
    except Exception as exc:
        return type(exc).__name__
    finally:
        mode.throw_on_data_dependent_ops = False


def case_is_set_to(torch, mode, ops, x, known):
    return f"{x.is_set_to(x)}, {x.is_set_to(x + 1)}"


SPECIAL = {
    "item": case_item, "is_set_to": case_is_set_to,
    "view_base": case_view_base, "dtype_view_version": case_dtype_view_version, "min_out": case_min_out, "column_out": case_column_out,
    "normalized": case_normalized, "raw_strided": case_raw_strided,
    "aliased_inputs": case_aliased_inputs, "known_output": case_known_output,
    "complex_view": case_complex_view,
}


def run_runtime(python: str, overlay: str) -> dict:
    env = dict(os.environ, PATCHSET_OVERLAY=overlay)
    proc = subprocess.run(
        [python, os.path.abspath(__file__), "--worker"],
        env=env, capture_output=True, text=True, check=True, cwd="/",
    )
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    default_python = str(repo / ".venv" / "bin" / "python")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-unpatched", default=default_python)
    parser.add_argument("--python-patched", default=default_python)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_cases()))
        return 0
    before = run_runtime(args.python_unpatched, "0")
    after = run_runtime(args.python_patched, "1")
    if before["file"] == after["file"]:
        print(f"error: both runtimes loaded {before['file']}", file=sys.stderr)
        return 1
    print(f"unpatched: {before['file']}\npatched:   {after['file']}\n")
    print("| case | unpatched 1.13.1 | patched |")
    print("|---|---|---|")
    for name, what in CASES:
        print(f"| {what} | {before['results'][name]} | {after['results'][name]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
