"""A fake that reached the fallback kernel leaves no reference cycle behind.

An error kept in a local of the frame its traceback holds makes a cycle through that frame's
arguments. When gc collects such a cycle, it clears the `__dict__` of the fakes in it even
if C++ (autograd's saved tensors) keeps them alive: the fake comes back to Python later, in
the backward, without `fake_mode`, `fake_device` or `constant`.
"""
import gc

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_utils import TestCase, run_tests

# an op with a CPU kernel only: every fake call of it takes the fallback
_lib = torch.library.Library("patchset_fallback_gc", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")


class FallbackLeavesNoCycleTest(TestCase):
    def setUp(self):
        gc.collect()
        gc.disable()
        self.addCleanup(gc.enable)

    def test_fallback_call_leaves_no_garbage(self):
        mode = FakeTensorMode(allow_fallback_kernels=True)
        x = mode.from_tensor(torch.randn(3))
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            with mode:
                torch.ops.patchset_fallback_gc.twice(x)
            gc.collect()
            garbage = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        self.assertEqual(garbage, [])

    def test_fake_saved_by_autograd_keeps_attributes_through_gc(self):
        mode = FakeTensorMode(allow_fallback_kernels=True)
        x = mode.from_tensor(torch.randn(3, requires_grad=True))
        with mode:
            y = x.clone()
            torch.ops.patchset_fallback_gc.twice(y)
            loss = (y * y).sum()  # autograd saves y: C++ keeps it alive
        del y
        gc.collect()
        with mode:
            (grad,) = torch.autograd.grad(loss, [x])
        self.assertIs(grad.fake_mode, mode)
        self.assertEqual(grad.shape, x.shape)


if __name__ == "__main__":
    run_tests()
