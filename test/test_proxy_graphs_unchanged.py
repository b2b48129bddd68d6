"""The series moves make_fx's tracing state into the tracer: the traced graphs must not change;
nor may its new Meta kernels change the graphs of training steps that used the fallback; its
view conversion makes the fakes of view inputs autograd views of their base's fake (converted
with a ShapeEnv, for tracing_mode="symbolic", they stay 1.13.1's leaf fakes): neither may their
graphs change, except where real execution differs (backward() through a view input fills its
base's .grad, through as_strided's backward as in later torch; autograd.grad reaches a view
input's base).

Each trace below runs in two subprocesses of the project venv, unpatched (PATCHSET_OVERLAY=0)
and patched, and the generated code (`gm.code`) of every graph must be the same text. The
subprocesses report which proxy_tensor.py they loaded, so a comparison of one module with
itself cannot pass unnoticed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Any, Dict

import pytest

TRACES = textwrap.dedent('''
    import json, sys, warnings
    import torch
    import torch.fx.experimental.proxy_tensor as proxy_tensor
    from torch.fx.experimental.proxy_tensor import (
        DecompositionInterpreter, get_isolated_graphmodule, make_fx)
    from torch.nn.utils import stateless
    from functorch._src import config
    from functorch.compile import aot_function

    torch.manual_seed(0)
    codes = {}

    def views(x, w):
        return [w.t(), x.view(-1), x.transpose(0, 1), torch.mm(x, w.t().contiguous())]

    for mode in ("real", "fake", "symbolic"):
        codes["views-" + mode] = make_fx(views, tracing_mode=mode)(
            torch.randn(2, 3), torch.randn(4, 3)).code

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    params = {n: p.detach().requires_grad_() for n, p in model.named_parameters()}

    def step(params, x):
        loss = stateless.functional_call(model, params, (x,)).sum()
        loss.backward()
        return [p.grad for p in params.values()]

    codes["backward-fake"] = make_fx(step, tracing_mode="fake")(params, torch.randn(5, 4)).code

    def inplace(x):
        v = x.t()
        x.mul_(2)
        y = torch.tensor(3.0)  # lift_fresh_copy and a constant propagated into item()
        return [v + y.item(), x.add_(y)]

    for mode in ("fake", "symbolic"):
        codes["inplace-" + mode] = make_fx(inplace, tracing_mode=mode)(torch.randn(2, 3)).code

    def nested(x):
        codes["nested-inner"] = get_isolated_graphmodule(lambda y: [y.t().sin()], (x,), {}).code
        return [x.cos()]

    codes["nested-outer"] = make_fx(nested, tracing_mode="fake")(torch.randn(2, 3)).code

    def compiler(name):
        def compile(gm, _):
            codes[name] = gm.code
            return gm
        return compile

    names = [n for n, _ in model.named_parameters()]

    def fn(x, *ps):
        return stateless.functional_call(model, dict(zip(names, ps)), (x,)).sum()

    config.use_fake_tensor = True
    out = aot_function(fn, compiler("aot-forward"), compiler("aot-backward"))(
        torch.randn(5, 4), *params.values())
    out.backward()

    # inputs that are views requiring grad: a leaf view with requires_grad set on it, and a
    # (non-leaf) view of a base that requires grad; their fakes are autograd views
    def view_inputs():
        leaf_view = torch.randn(4, 3)[1:]
        leaf_view.requires_grad_()
        return {"leafview": leaf_view,
                "gradbase": torch.randn(4, 3, requires_grad=True)[1:].t().t()}

    def grads_of_view(v, w):
        out = (v.sin() * w).sum()
        return [out] + list(torch.autograd.grad(out, [v, w]))

    for kind, v in view_inputs().items():
        for mode in ("fake", "symbolic"):
            codes["viewinput-" + kind + "-" + mode] = make_fx(grads_of_view, tracing_mode=mode)(
                v, torch.randn(3, 3, requires_grad=True)).code

    def view_fn(v, w):
        return (v.sin() * w).sum()

    for kind, v in view_inputs().items():
        aot_function(view_fn, compiler("aot-viewinput-" + kind + "-forward"),
                     compiler("aot-viewinput-" + kind + "-backward"))(
            v, torch.randn(3, 3, requires_grad=True)).backward()

    # backward() through a view input whose base requires grad: real execution fills the base's
    # .grad, not the (non-leaf) view's; this graph changes with the series (see the test below)
    def backward_of_view(v):
        v.sin().sum().backward()
        return [v.grad] + ([] if v._base is None else [v._base.grad])

    for mode in ("real", "fake"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # .grad of a non-leaf
            codes["viewbackward-" + mode] = make_fx(backward_of_view, tracing_mode=mode)(
                torch.randn(4, 3, requires_grad=True)[1:].t()).code

    # training steps of torchvision models (small images) and of nn modules whose backward
    # ops have Meta kernels in the series: a meta kernel changes no graph
    import torchvision

    def train_step_of(net):
        def train_step(params, buffers, x, target):
            out = stateless.functional_call(net, {**params, **buffers}, (x,))
            loss = torch.nn.functional.cross_entropy(out, target)
            loss.backward()
            return [loss] + [p.grad for p in params.values()]
        net_params = {n: torch.nn.Parameter(p.detach().clone()) for n, p in net.named_parameters()}
        net_buffers = {n: b.detach().clone() for n, b in net.named_buffers()}
        return lambda x, target: make_fx(train_step, tracing_mode="fake")(
            net_params, net_buffers, x, target).code

    for name in ("resnet18", "mobilenet_v2"):
        codes["model-" + name] = train_step_of(getattr(torchvision.models, name)())(
            torch.randn(2, 3, 32, 32), torch.randint(0, 1000, (2,)))

    class Mix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            nn = torch.nn
            self.conv1d = nn.Conv1d(3, 4, 3, groups=1, dilation=2)
            self.convt = nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1)
            self.conv3d = nn.Conv3d(3, 2, 3, padding=1)
            self.norm = nn.GroupNorm(2, 4)
            self.pad = nn.ReflectionPad2d(1)
            self.up = nn.Upsample(scale_factor=2)
            self.pool3d = nn.MaxPool3d(2)
            self.pad3d = nn.ReplicationPad3d(1)
            self.head = nn.Linear(4 + 4 + 2, 5)

        def forward(self, x):
            a = self.conv1d(x.flatten(2)).mean(2)
            b = torch.nn.functional.adaptive_avg_pool2d(
                self.pad(self.norm(self.convt(x))),
                (3, 2)).mean((2, 3))
            c = self.pad3d(self.pool3d(self.up(self.conv3d(x.unsqueeze(2).expand(-1, -1, 4, -1, -1)))))
            c = torch.nn.functional.adaptive_avg_pool3d(c, 2).mean((2, 3, 4))
            return self.head(torch.cat([a, b, c], 1))

    codes["model-nn-mix"] = train_step_of(Mix())(torch.randn(2, 3, 6, 6), torch.randint(0, 5, (2,)))

    # traces with view inputs: backward() through a view input, mutations through a base and
    # its view passed together, autograd.grad to the base of a view input.  Symbolic tracing
    # gives leaf fakes for views (as 1.13.1) and fails on the first and last.
    def traced_or_error(name, fn, mode, *args):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # .grad of a non-leaf
                codes[name] = make_fx(fn, tracing_mode=mode)(*args).code
        except Exception as e:
            codes[name] = "error: " + type(e).__name__ + ": " + str(e).splitlines()[0]

    def mutate_through_view(x, v):
        x.mul_(2)
        v.add_(1)
        return [v * 2, x]

    def grad_to_base_of_view(x, v):
        return list(torch.autograd.grad((v.sin() * 2).sum(), [x]))

    for mode in ("fake", "symbolic"):
        traced_or_error("symview-backward-" + mode, backward_of_view, mode,
                        torch.randn(4, 3, requires_grad=True)[1:].t())
        base = torch.randn(4, 3)
        traced_or_error("symview-mutation-" + mode, mutate_through_view, mode, base, base[1:])
        base = torch.randn(4, 3, requires_grad=True)
        traced_or_error("symview-gradtobase-" + mode, grad_to_base_of_view, mode, base, base[1:])

    gm = torch.fx.symbolic_trace(lambda x: torch.nn.functional.silu(x).t())
    graph = torch.fx.Graph()
    DecompositionInterpreter(gm, graph).run(torch.randn(2, 3))
    codes["decomposition-interpreter"] = torch.fx.GraphModule({}, graph).code

    print(json.dumps({"proxy_tensor": proxy_tensor.__file__, "codes": codes}))
''')


def saved_values_sorted(code: str) -> str:
    """aot's partitioner lists the saved values in set order (node ids), which differs from run
    to run on either side: sort the names of the `def forward(...)` and `return [...]` lines."""
    def sort_items(match: "re.Match[str]") -> str:
        return match.group(1) + ", ".join(sorted(match.group(2).split(", "))) + match.group(3)

    code = re.sub(r"^(def forward\(self, )(.*)(\):)$", sort_items, code, flags=re.M)
    return re.sub(r"^(    return \[)(.*)(\])$", sort_items, code, flags=re.M)


def traced(overlay: str) -> Dict[str, Any]:
    env = dict(os.environ, PATCHSET_OVERLAY=overlay)
    proc = subprocess.run([sys.executable, "-c", TRACES], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def both() -> Dict[str, Dict[str, Any]]:
    return {"unpatched": traced("0"), "patched": traced("1")}


def test_sides_load_different_proxy_tensor_modules(both: Dict[str, Dict[str, Any]]) -> None:
    assert "/torch_overlay/" not in both["unpatched"]["proxy_tensor"]
    assert "/torch_overlay/" in both["patched"]["proxy_tensor"]


# what symbolic tracing cannot trace, patched or not: it converts views to leaf fakes, so
# backward() through a view input fails, and autograd.grad finds no path from a view input to
# its base (unpatched in fake mode too: its fakes of views are leaves)
LEAF_VIEW_FAILS = {
    "symview-backward-symbolic": "RuntimeError: Cannot call strides() on tensor with symbolic",
    "symview-gradtobase-symbolic": "RuntimeError: One of the differentiated Tensors appears to not",
}
UNPATCHED_FAILS = {
    **LEAF_VIEW_FAILS,
    "symview-gradtobase-fake": "RuntimeError: One of the differentiated Tensors appears to not",
}
FAILS = {"unpatched": UNPATCHED_FAILS, "patched": LEAF_VIEW_FAILS}


def test_every_trace_made_a_graph(both: Dict[str, Dict[str, Any]]) -> None:
    for label, side in both.items():
        assert len(side["codes"]) == 30
        for name, code in side["codes"].items():
            if name in FAILS[label]:
                assert code.startswith("error: " + FAILS[label][name]), code
            else:
                assert "def forward" in code, (label, name, code)


SYMBOLIC_ONLY = ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset")


def aten_calls(code: str) -> list:
    """The aten ops a graph calls, in order, without the symbolic trace's size queries."""
    calls = re.findall(r"torch\.ops\.aten\.([a-z_0-9]+(?:\.[A-Za-z_0-9]+)?)", code)
    return [c for c in calls if c not in SYMBOLIC_ONLY]


# The backward of a view input's fake is as_strided's (the fake of a view is made by as_strided
# on its base's fake, as in later torch) where real execution runs the view ops' (t, slice):
# the one graph of this file that changes.
VIEW_KIND_BACKWARD = ["t.default", "slice_backward.default"]
AS_STRIDED_BACKWARD = ["new_empty.default", "zero_.default", "as_strided.default",
                       "copy_.default", "as_strided.default"]


def replaced(calls: list, old: list, new: list) -> list:
    for i in range(len(calls) - len(old) + 1):
        if old and calls[i:i + len(old)] == old:
            return calls[:i] + new + calls[i + len(old):]
    return calls


def test_fake_backward_through_view_input_runs_as_strided_backward(
        both: Dict[str, Dict[str, Any]]) -> None:
    # the rest follows from it: AccumulateGrad copies the base's grad, a view of a new tensor
    real = aten_calls(both["patched"]["codes"]["viewbackward-real"])
    fake = aten_calls(both["patched"]["codes"]["viewbackward-fake"])
    assert replaced(real, VIEW_KIND_BACKWARD, []) != real
    assert "as_strided.default" not in real
    assert replaced(fake, AS_STRIDED_BACKWARD, []) != fake
    assert replaced(fake, VIEW_KIND_BACKWARD, []) == fake


@pytest.mark.parametrize("name", [
    "views-real", "views-fake", "views-symbolic", "backward-fake", "inplace-fake",
    "inplace-symbolic", "nested-inner", "nested-outer", "decomposition-interpreter",
    "viewinput-leafview-fake", "viewinput-leafview-symbolic", "viewinput-gradbase-fake",
    "viewinput-gradbase-symbolic", "model-resnet18", "model-mobilenet_v2", "model-nn-mix",

    "viewinput-gradbase-symbolic", "symview-mutation-fake", "symview-mutation-symbolic",
    "symview-backward-symbolic", "symview-gradtobase-symbolic",
])
def test_traced_code_is_unchanged(both: Dict[str, Dict[str, Any]], name: str) -> None:
    assert both["patched"]["codes"][name] == both["unpatched"]["codes"][name]


@pytest.mark.parametrize("name", [
    "aot-forward", "aot-backward", "aot-viewinput-leafview-forward",
    "aot-viewinput-leafview-backward", "aot-viewinput-gradbase-forward",
    "aot-viewinput-gradbase-backward",
])
def test_aot_code_is_unchanged_up_to_saved_value_order(both: Dict[str, Dict[str, Any]],
                                                       name: str) -> None:
    patched, unpatched = (saved_values_sorted(both[side]["codes"][name])
                          for side in ("patched", "unpatched"))
    assert patched == unpatched


def returned(code: str) -> str:
    return [line.strip() for line in code.splitlines() if line.strip().startswith("return ")][-1]


def test_backward_through_view_input_reaches_its_base_as_real(
        both: Dict[str, Dict[str, Any]]) -> None:
    # Real execution: the view input is no leaf, backward() fills its base's .grad and leaves
    # the view's None.  Fakes of views are autograd views of their base's fake with the series, so
    # the fake trace returns the same (the base's grad made through the fake view's
    # AsStridedBackward0); before, the fake of the view was a leaf that got the grad itself.
    assert returned(both["patched"]["codes"]["viewbackward-real"]).startswith("return [None, ")
    assert returned(both["patched"]["codes"]["viewbackward-fake"]).startswith("return [None, ")
    assert not returned(both["unpatched"]["codes"]["viewbackward-fake"]).startswith(
        "return [None, ")
