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
    ("strided_input_view", "narrow view of a non-contiguous, offset fake"),
    ("not_a_view", "returns storage-sharing non-view (reads past input)"),
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
                    return f"fake view of {name} {tuple(out.shape)}"
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
                args = (x, y) if name == "second_view" else (x,)
                results[name] = describe(getattr(ops, name)(*args), x, y)
        except NotImplementedError as exc:
            last = str(exc).strip().splitlines()[-1]
            results[name] = "NotImplementedError" + (
                f": ...{last[-60:]}" if "FakeTensor fallback" in last else " (bare)"
            )
    return {"file": fake_tensor.__file__, "results": results}


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
