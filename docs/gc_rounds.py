"""Counts the gc.collect() calls it takes to free a FakeTensorMode after the user drops
everything, for each way a fake gets linked (docs/memo-ownership.md). Run it with the
project .venv (patched) or PATCHSET_OVERLAY=0 (unpatched)."""
import gc, sys, weakref, torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

def rounds(build):
    gc.collect()
    ref = build()
    n = 0
    while ref() is not None and n < 6:
        gc.collect(); n += 1
    return n if ref() is None else "not freed after 6"

reals = {}
def s_leaf():
    p = reals.setdefault("p", torch.nn.Parameter(torch.randn(4, 4)))
    m = FakeTensorMode(); f = m.from_tensor(p)
    with m: o = f * 2
    holder = [o]; holder.append(holder)  # o kept in a garbage cycle
    return weakref.ref(m)
def s_view():
    x = reals.setdefault("x", torch.randn(8, 4))
    v = reals.setdefault("v", x[1:])
    m = FakeTensorMode(); f = m.from_tensor(v)
    return weakref.ref(m)
def s_view_user_link():
    x = reals.setdefault("x2", torch.randn(8, 4))
    m = FakeTensorMode(); f = m.from_tensor(x); u = f[1:]
    holder = [u]; holder.append(holder)
    return weakref.ref(m)
def s_nonleaf():
    a = reals.setdefault("a", torch.randn(4, requires_grad=True))
    b = reals.setdefault("b", a * 2)
    m = FakeTensorMode(); f = m.from_tensor(b)
    return weakref.ref(m)
def s_grad():
    p = reals.setdefault("pg", torch.nn.Parameter(torch.randn(4)))
    p.grad = torch.randn(4)
    m = FakeTensorMode(); f = m.from_tensor(p)
    return weakref.ref(m)
def s_grad_user():
    p = reals.setdefault("pg2", torch.nn.Parameter(torch.randn(4)))
    m = FakeTensorMode(); f = m.from_tensor(p); g = m.from_tensor(torch.randn(4))
    f.grad = g
    return weakref.ref(m)
def s_saved():
    p = reals.setdefault("ps", torch.nn.Parameter(torch.randn(4)))
    m = FakeTensorMode(); f = m.from_tensor(p)
    with m: y = f * f
    holder = [y]; holder.append(holder)
    return weakref.ref(m)
def s_makefx():
    lin = reals.setdefault("lin", torch.nn.Linear(4, 4))
    x = torch.randn(2, 4)
    modes = []
    orig = FakeTensorMode.__init__
    def init(self, *a, **k):
        orig(self, *a, **k); modes.append(weakref.ref(self))
    FakeTensorMode.__init__ = init
    try:
        def f(x, w, b):
            out = torch.nn.functional.linear(x, w, b).sum(); out.backward(); return w.grad
        w = lin.weight; b = lin.bias
        g = make_fx(f, tracing_mode="fake")(x, w, b)
    finally:
        FakeTensorMode.__init__ = orig
    return modes[0]
for s in [s_leaf, s_view, s_view_user_link, s_nonleaf, s_grad, s_grad_user, s_saved, s_makefx]:
    print(s.__name__, rounds(s))
