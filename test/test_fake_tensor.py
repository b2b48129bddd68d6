# Owner(s): ["module: meta tensors"]

from torch.testing._internal.common_utils import TestCase, run_tests, skipIfCrossRef, skipIfRocm
import torch
import itertools
import numpy as np
from torch.testing._internal.jit_utils import RUN_CUDA
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorMode,
    FakeTensorConverter,
    DynamicOutputShapeException,
)
from torch.testing import FileCheck
from torch import nn
import unittest
import unittest.mock
import torch._prims as prims
import contextlib
import weakref
import copy
import gc
import inspect
import subprocess
import sys
import textwrap
import threading
import warnings
from torch._subclasses.meta_utils import MetaConverter
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    run_fallback_kernel,
    UnsupportedFallbackException,
)
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

class FakeTensorTest(TestCase):
    def checkType(self, t, device_str, size):
        self.assertTrue(isinstance(t, FakeTensor))
        self.assertEqual(t.device.type, device_str)
        self.assertEqual(list(t.size()), size)

    def test_basic(self):
        x = torch.empty(2, 2, device="cpu")
        y = torch.empty(4, 2, 2, device="cpu")
        with FakeTensorMode() as mode:
            x = mode.from_tensor(x)
            y = mode.from_tensor(y)
            z = x + y
            self.assertEqual(z.shape, (4, 2, 2))
            self.assertEqual(z.device, torch.device("cpu"))
            self.assertTrue(isinstance(z, FakeTensor))

    def test_parameter_instantiation(self):
        with FakeTensorMode():
            x = torch.rand([4])
            y = torch.nn.parameter.Parameter(x)
            self.assertTrue(isinstance(y, torch.nn.Parameter))

    def test_non_parameter_grad(self):
        mode = FakeTensorMode()
        t = torch.rand([4], requires_grad=True)
        fake_t = mode.from_tensor(t)
        self.assertEqual(fake_t.requires_grad, t.requires_grad)

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_index_cuda_with_cpu(self):
        with FakeTensorMode():
            x = torch.rand([2048], device='cuda')
            out = x[torch.zeros([36], dtype=torch.int64)]
            self.checkType(out, "cuda", [36])

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_shape_take_not_device(self):
        with FakeTensorMode():
            x = torch.empty(1, device="cpu")
            y = torch.empty(8, 8, device="cuda")
            out = x.resize_as_(y)
            self.assertEqual(out.shape, (8, 8))
            self.assertEqual(out.device.type, "cpu")
            self.assertTrue(isinstance(out, FakeTensor))

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_zero_dim(self):
        with FakeTensorMode() as mode:
            x = torch.tensor(0.)
            y = torch.rand([4, 4], device="cuda")
            out = x + y
            self.assertEqual(out.shape, (4, 4))
            self.assertEqual(out.device, y.device)
            self.assertTrue(isinstance(out, FakeTensor))

    def test_nan_to_num(self):
        with FakeTensorMode():
            for dtype in [torch.float16, torch.float32]:
                x = torch.rand([4], dtype=dtype)
                y = torch.nan_to_num(x, nan=None)
                z = torch.nan_to_num(x, 0.0)
                self.assertEqual(dtype, y.dtype)
                self.assertEqual(dtype, z.dtype)

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_throw(self):
        x = torch.tensor(0.)  # TODO: tensor() errors
        with FakeTensorMode() as mode:
            x_conv = mode.from_tensor(x)
            y = torch.rand([4, 4], device="cuda")
            z = torch.rand([4, 4], device="cpu")
            self.assertRaises(Exception, lambda: torch.lerp(x_conv, y, z))

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_type_as(self):
        with FakeTensorMode():
            x = torch.rand([16, 1], device="cpu")
            y = torch.rand([4, 4], device="cuda")
            out = x.type_as(y)
            self.assertEqual(out.device.type, "cuda")
            self.assertTrue(isinstance(out, FakeTensor))

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_setitem(self):
        for device in ["cpu", "cuda"]:
            with FakeTensorMode():
                x = torch.rand([16, 1], device=device)
                x[..., 0] = 0

    def test_fake_dispatch_keys(self):
        with FakeTensorMode():
            x = torch.rand([4])
            f = FileCheck().check("CPU").check("ADInplaceOrView").check("AutogradCPU").check("AutocastCPU")
            f.run(torch._C._dispatch_key_set(x))

            with torch.inference_mode():
                x = torch.rand([4])
                y = x + x
                FileCheck().check("CPU").check("AutocastCPU").run(torch._C._dispatch_key_set(y))
                FileCheck().check_not("ADInplaceOrView").check_not("Autograd").run(torch._C._dispatch_key_set(y))

    def test_constructor(self):
        with FakeTensorMode():
            x = torch.rand([4, 4], device="cpu")

        self.assertTrue(isinstance(x, FakeTensor))
        self.assertTrue(x.device.type == "cpu")

    def test_mode(self):
        with FakeTensorMode():
            y = torch.rand([4], device="cpu")
            out = y + y

        self.assertTrue(isinstance(out, FakeTensor))

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_non_kwarg_device(self):
        with FakeTensorMode():
            x = torch.rand([16, 1], device="cpu")
            y = x.to(torch.device("cpu"))
            self.assertIs(x, y)
            z = x.to(torch.device("cuda"))
            self.assertEqual(z.device.type, "cuda")

    def test_fake_mode_error(self):
        x = torch.rand([4, 4])

        with self.assertRaisesRegex(Exception, "non-Fake Tensor inputs"):
            with FakeTensorMode():
                y = x[0]

    def test_fake_grad_copy(self):
        x = torch.rand([4, 4], requires_grad=True)
        x.grad = torch.rand([4, 4])
        mode = FakeTensorMode()
        fake_x = mode.from_tensor(x)
        prims.utils.compare_tensor_meta(fake_x, x)
        prims.utils.compare_tensor_meta(fake_x.grad, x.grad)

        self.assertTrue(isinstance(fake_x.grad, FakeTensor))

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_like_constructor(self):
        with FakeTensorMode():
            x = torch.rand([4, 4])
            y = torch.ones_like(x)
            self.assertTrue(isinstance(y, FakeTensor))
            self.assertEqual(y.device.type, "cpu")
            z = torch.ones_like(x, device="cuda")
            self.assertTrue(isinstance(z, FakeTensor))
            self.assertEqual(z.device.type, "cuda")

    def test_binary_op_type_promotion(self):
        with FakeTensorMode():
            x = torch.empty([2, 2], dtype=torch.float)
            y = torch.empty([2, 2], dtype=torch.int64)
            out = x / y
            self.assertEqual(out.dtype, torch.float)
            self.assertEqual(out.device.type, "cpu")

    def test_from_numpy(self):
        with FakeTensorMode():
            x = torch.tensor(np.zeros([4, 4]))
            self.checkType(x, "cpu", [4, 4])

    def test_randperm(self):
        x = torch.randperm(10)
        y = torch.randperm(5, device="cpu")
        with FakeTensorMode():
            x1 = torch.randperm(10)
            prims.utils.compare_tensor_meta(x, x1)
            y1 = torch.randperm(5, device="cpu")
            prims.utils.compare_tensor_meta(y, y1)


    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_cpu_fallback(self):
        with FakeTensorMode(allow_fallback_kernels=False):
            filters = torch.randn(8, 4, 3, 3).cuda()
            inputs = torch.randn(1, 4, 5, 5).cuda()
            out = torch.nn.functional.conv2d(inputs, filters, padding=1)
            self.assertEqual(out.device.type, "cuda")
            self.assertEqual(list(out.size()), [1, 8, 5, 5])

        with FakeTensorMode(allow_fallback_kernels=True):
            # intentionally bad inputs
            filters = torch.randn(8, 20, 3, 3).cuda()
            inputs = torch.randn(1, 7, 10, 5).cuda()
            with self.assertRaises(RuntimeError):
                torch.nn.functional.conv2d(inputs, filters, padding=1)

        with FakeTensorMode(allow_fallback_kernels=True):
            filters = torch.randn(8, 4, 3, 3).cuda()
            inputs = torch.randn(1, 4, 5, 5).cuda()

            out = torch.nn.functional.conv2d(inputs, filters, padding=1)
            self.assertEqual(out.device.type, "cuda")
            self.assertEqual(list(out.size()), [1, 8, 5, 5])

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_normalize_device(self):
        with FakeTensorMode():
            x = torch.empty(1, device="cuda")
            y = torch.empty(1, device=f"cuda:{torch.cuda.current_device()}")
            out = x + y
        self.checkType(out, "cuda", [1])

    def test_recursive_invocation(self):
        mode = FakeTensorMode()
        with mode:
            x = torch.tensor(2)
            mode.in_kernel_invocation = True
            y = x + x
            self.assertTrue(mode.in_kernel_invocation)

    @skipIfRocm
    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_cudnn_rnn(self):
        def fn(
            a0,
            b0,
            b1,
            b2,
            b3,
            b4,
            b5,
            b6,
            b7,
            b8,
            b9,
            b10,
            b11,
            b12,
            b13,
            b14,
            b15,
            a3,
            a4,
            a5,
        ):
            a1 = [
                b0,
                b1,
                b2,
                b3,
                b4,
                b5,
                b6,
                b7,
                b8,
                b9,
                b10,
                b11,
                b12,
                b13,
                b14,
                b15,
            ]
            return torch.ops.aten._cudnn_rnn(
                a0,
                a1,
                4,
                a3,
                a4,
                a5,
                2,
                2048,
                0,
                2,
                False,
                0.0,
                False,
                True,
                [],
                None,
            )

        mode = FakeTensorMode()
        for i, context in enumerate([contextlib.nullcontext, lambda: mode]):
            with context():
                inps = (
                    torch.randn([92, 8, 2048]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192, 4096]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192, 4096]).cuda(),
                    torch.randn([8192, 2048]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([8192]).cuda(),
                    torch.randn([167837696]).cuda(),
                    torch.randn([4, 8, 2048]).cuda(),
                    torch.randn([4, 8, 2048]).cuda(),
                )
                out = fn(*inps)
                self.assertIs(out[4], inps[-3])
                for ten in out:
                    if i == 1:
                        self.assertTrue(isinstance(ten, FakeTensor))
                    self.assertEqual(ten.device.type, 'cuda')

    @skipIfRocm
    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_fallback_memory_prop(self):
        m = nn.Conv2d(16, 33, 3, stride=2, device="cuda", dtype=torch.half)
        m = m.to(memory_format=torch.channels_last)
        mode = FakeTensorMode()
        # TODO: module.to() doesn't work because it assigns .data, which is ignored
        with torch._subclasses.fake_tensor.FakeCopyMode(mode):
            mod_copied = copy.deepcopy(m)

        with mode:
            input = torch.rand(20, 16, 50, 100, dtype=torch.half, device="cuda").to(memory_format=torch.channels_last)
            out = mod_copied(input)
            self.assertTrue(out.is_contiguous(memory_format=torch.channels_last))
            self.checkType(out, "cuda", [20, 33, 24, 49])

    def test_data_dependent_operator(self):
        with FakeTensorMode(allow_fallback_kernels=False):
            x = torch.rand([10, 10])

            self.assertRaises(DynamicOutputShapeException, lambda: torch.nonzero(x))

    def checkMetaProps(self, t1, t2):
        prims.utils.compare_tensor_meta(t1, t2)

    @skipIfCrossRef
    def test_deepcopy(self):
        with FakeTensorMode() as mode:
            pass
        mod = torch.nn.BatchNorm2d(10)
        with torch._subclasses.fake_tensor.FakeCopyMode(mode):
            mod_copied = copy.deepcopy(mod)

        def check_copy(mod, mod_copied):
            for name, param in itertools.chain(mod.named_parameters(), mod.named_buffers()):
                param_copied = getattr(mod_copied, name)
                self.checkMetaProps(param, param_copied)
                self.assertTrue(isinstance(param_copied, FakeTensor))
                self.assertEqual(isinstance(param, torch.nn.Parameter), isinstance(param_copied, torch.nn.Parameter))
                self.assertEqual(param.requires_grad, param_copied.requires_grad)

        check_copy(mod, mod_copied)

        class ModuleNew(torch.nn.Module):
            def __init__(self):
                super(ModuleNew, self).__init__()
                self.a = torch.rand([10, 2])
                self.b = self.a
                self.c = self.a[0]

        mod = ModuleNew()
        with torch._subclasses.fake_tensor.FakeCopyMode(mode):
            mod_copied = copy.deepcopy(mod)

        self.assertIs(mod_copied.a, mod_copied.b)
        self.assertEqual(mod_copied.b.storage()._cdata, mod_copied.a.storage()._cdata)

    @unittest.skipIf(not RUN_CUDA, "requires cuda")
    def test_new(self):
        with FakeTensorMode():
            a = torch.rand([16, 1])
            self.checkType(a.new(10, 10), "cpu", [10, 10])
            self.checkType(a.new([1, 2, 3, 4]), "cpu", [4])
            b = torch.rand([4, 4], device='cuda')
            self.checkType(b.new(device='cuda'), "cuda", [0])
            self.checkType(a.new(torch.rand([1])), "cpu", [1])

    def test_scalar_inputs(self):
        with FakeTensorMode():
            self.checkType(torch.div(3, 2), "cpu", [])
            ten = torch.zeros(2, dtype=torch.int32) * 2.0
            self.assertEqual(ten.dtype, torch.float)
            self.checkType(ten, "cpu", [2])


class FakeTensorConstHandling(TestCase):
    def assertConst(self, *args):
        for arg in args:
            self.assertTrue(arg.constant is not None)

    def assertNotConst(self, *args):
        for arg in args:
            self.assertTrue(arg.constant is None)

    def test_simple(self):
        with FakeTensorMode():
            x = torch.tensor(4.)
            self.assertEqual(x.item(), 4.)

    def test_inplace_add(self):
        with FakeTensorMode():
            x = torch.tensor(4.)
            y = x.add_(1)
            self.assertEqual(x.item(), 5.)
            self.assertEqual(y.item(), 5.)
            self.assertConst(x, y)

    def test_shared_storages(self):
        with FakeTensorMode():
            x = torch.tensor([4.])
            y = x[:]

            self.assertEqual(x.storage()._cdata, y.storage()._cdata)
            self.assertEqual(x.constant.storage()._cdata, y.constant.storage()._cdata)

    def test_constant_invalidation(self):
        with FakeTensorMode():
            x = torch.tensor([1.])
            self.assertConst(x)
            y = torch.rand([1])
            x.add_(y)
            self.assertNotConst(x)

    def test_inplace_view_invalidation(self):
        with FakeTensorMode():
            x = torch.tensor([1])
            self.assertConst(x)
            x.resize_([2])
            self.assertEqual(x.size(0), 2)
            self.assertNotConst(x)

    def test_fake_tensor_in_intlist_repro(self):

        def fn(tensors):
            max_size = torch.tensor([800, 1216], dtype=torch.int64)
            batch_shape = [len(tensors)] + list(tensors[0].shape[:-2]) + list(max_size)
            return tensors[0].new_full(batch_shape, 0.0)

        with self.assertRaises(torch._subclasses.fake_tensor.DataDependentOutputException):
            with torch._subclasses.fake_tensor.FakeTensorMode(throw_on_data_dependent_ops=True):
                a = torch.randn(3, 800, 1199)
                b = torch.randn(3, 800, 800)
                inputs = [a, b]
                ref = fn(inputs)

    def test_shared_storage_invalidation(self):
        with FakeTensorMode():
            x = torch.tensor([1.])
            y = x[:]
            self.assertConst(x, y)
            y.add_(torch.rand([1]))
            self.assertNotConst(x, y)

    def test_aliased_const_write(self):
        with FakeTensorMode():
            x = torch.tensor([1])
            y = x.expand([4])
            self.assertNotConst(y)
            y[0] = 1
            self.assertNotConst(x)


class KernelInvocationThreadTest(TestCase):
    """A kernel running in one thread leaves the fakes of other threads as they are."""

    def test_kernel_invocation_of_another_thread_keeps_devices(self):
        import torch._subclasses.fake_tensor as fake_tensor
        mode = FakeTensorMode()
        fake = mode.from_tensor(torch.randn(2))
        inside, release = threading.Event(), threading.Event()

        def kernel():
            with fake_tensor.in_kernel_invocation_manager(mode):
                inside.set()
                release.wait(60)

        other = threading.Thread(target=kernel)
        other.start()
        try:
            self.assertTrue(inside.wait(60))
            self.assertEqual(fake.device, torch.device("cpu"))
            converted = mode.from_tensor(torch.randn(4, 3)[1:])
            self.assertEqual(converted.device, torch.device("cpu"))
            with mode:
                out = fake + 1
            self.assertEqual(out.device, torch.device("cpu"))
        finally:
            release.set()
            other.join()


# Threads whose first device queries of fakes in a fresh process, made under
# the mode, all start at once.
_FIRST_DEVICE_QUERIES = r"""
import sys, threading, torch
from torch._subclasses.fake_tensor import FakeTensorMode
n_threads = int(sys.argv[1])
mode = FakeTensorMode()
fakes = [mode.from_tensor(torch.randn(4)) for _ in range(n_threads)]
start = threading.Barrier(n_threads)
counts = {"errors": 0, "wrong": 0}

def query(fake):
    start.wait()
    try:
        with mode:
            devices = [fake.device, torch.ones_like(fake).device]
        devices += [fake.device, torch.ones_like(fake).device]
        counts["wrong"] += sum(d != torch.device("cpu") for d in devices)
    except Exception:
        counts["errors"] += 1

threads = [threading.Thread(target=query, args=(f,)) for f in fakes]
for th in threads:
    th.start()
for th in threads:
    th.join()
print(" ".join(f"{k}={v}" for k, v in counts.items()))
"""

# A device query under the mode whose lookup of prim.device, if torch.ops makes
# one, another thread's lookup overtakes: the other object ends up cached.
_OVERTAKEN_DEVICE_QUERY = r"""
import threading, torch, torch._ops
from torch._subclasses.fake_tensor import FakeTensorMode
mode = FakeTensorMode()
fake = mode.from_tensor(torch.randn(2))
original = torch._ops.OpOverloadPacket.__getattr__
counts = {"errors": 0, "wrong": 0, "overtaken": 0}

def resolving(self, key):
    made = original(self, key)
    if self._qualified_op_name == "prim::device" and not counts["overtaken"]:
        counts["overtaken"] += 1
        delattr(self, key)
        other = threading.Thread(target=original, args=(self, key))
        other.start()
        other.join()
    return made

torch._ops.OpOverloadPacket.__getattr__ = resolving
try:
    with mode:
        counts["wrong"] += fake.device != torch.device("cpu")
except Exception:
    counts["errors"] += 1
print(" ".join(f"{k}={v}" for k, v in counts.items()))
"""

# The torch.ops names fake dispatch looks up for the first time: device queries
# of a fake and a tensor literal under the mode.
_FAKE_DISPATCH_LOOKUPS = r"""
import torch
from torch._ops import OpOverloadPacket, _OpNamespace, _Ops
from torch._subclasses.fake_tensor import FakeTensorMode
mode = FakeTensorMode()
fake = mode.from_tensor(torch.randn(2))
first_lookups = []

def recorded(lookup):
    def __getattr__(self, name):
        first_lookups.append(name)
        return lookup(self, name)
    return __getattr__

for cls in (_Ops, _OpNamespace, OpOverloadPacket):
    cls.__getattr__ = recorded(cls.__getattr__)
fake.device
with mode:
    fake.device
    torch.tensor([1.0, 2.0])
print(first_lookups)
"""


def _run_fresh(test, script, *argv):
    proc = subprocess.run([sys.executable, "-c", script, *map(str, argv)],
                          capture_output=True, text=True, timeout=120)
    test.assertEqual(proc.returncode, 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


class OverloadLookupThreadTest(TestCase):
    """The overloads fake dispatch recognizes are resolved before any thread
    can race on their first lookup, so device queries get fake devices."""

    def test_fake_dispatch_looks_up_no_overload_for_the_first_time(self):
        self.assertEqual(_run_fresh(self, _FAKE_DISPATCH_LOOKUPS), "[]\n")

    def test_overtaken_device_query_gets_fake_device(self):
        out = _run_fresh(self, _OVERTAKEN_DEVICE_QUERY)
        self.assertEqual(out, "errors=0 wrong=0 overtaken=0\n")

    def test_threads_first_device_queries_get_fake_devices(self):
        for _ in range(3):
            out = _run_fresh(self, _FIRST_DEVICE_QUERIES, 16)
            self.assertEqual(out, "errors=0 wrong=0\n")


def contains_type(type: torch._C.Type, maybe_contained_type: torch._C.Type):
    return maybe_contained_type.isSubtypeOf(type) or any(
        contains_type(e, maybe_contained_type) for e in type.containedTypes()
    )


class FakeTensorConverterTest(TestCase):
    def test_memoized_conversion_to_meta(self):
        x = torch.rand(2, 2, 2)
        mode = FakeTensorMode()
        self.assertTrue(mode.from_tensor(x) is mode.from_tensor(x))

    def test_memoized_conversion_from_meta(self):
        x = torch.rand(2, 2).to(device="meta")
        mode = FakeTensorMode()
        converter = mode.fake_tensor_converter
        self.assertTrue(converter(mode, x, "cpu") is converter(mode, x, "cpu"))

    def test_separate_tensor_storages_view(self):
        x = torch.rand(2, 2, 2)
        y = x[0]
        mode = FakeTensorMode()
        converter = mode.fake_tensor_converter
        x_conv = converter(mode, x)
        y_conv = converter(mode, y)
        self.assertEqual(torch._C._storage_id(x_conv), torch._C._storage_id(y_conv))

    def test_separate_tensor_storages_non_view(self):
        x = torch.rand(2, 2, 2)
        y = torch.rand(4, 2)
        y.set_(x.storage())
        mode = FakeTensorMode()
        converter = mode.fake_tensor_converter
        x_conv = converter(mode, x)
        y_conv = converter(mode, y)
        stor_id = torch._C._storage_id(x_conv)
        self.assertEqual(stor_id, torch._C._storage_id(y_conv))
        del x
        self.assertEqual(len(converter.tensor_memo), 1)
        converter.meta_converter.check_for_expired_weak_storages()
        self.assertEqual(len(converter.meta_converter.storage_memo), 1)
        del y
        self.assertEqual(len(converter.tensor_memo), 0)
        converter.meta_converter.check_for_expired_weak_storages()
        self.assertEqual(len(converter.meta_converter.storage_memo), 0)


    def test_dead_weak_ref(self):
        x = torch.rand(2, 2, 2)
        y = x[0]
        mode = FakeTensorMode()
        converter = FakeTensorConverter()
        x_conv = converter(mode, x)
        x_conv_storage = torch._C._storage_id(x_conv)
        del x_conv
        gc.collect()
        self.assertFalse(x in converter.tensor_memo)
        y_conv = converter(mode, y)
        self.assertEqual(x_conv_storage, torch._C._storage_id(y_conv))

    def test_dead_key(self):
        x = torch.rand(2, 2, 2)
        mode = FakeTensorMode()
        converter = FakeTensorConverter()
        x_conv = converter(mode, x)
        self.assertEqual(len(converter.tensor_memo), 1)
        self.assertEqual(len(converter.meta_converter.tensor_memo), 1)
        del x
        self.assertEqual(len(converter.tensor_memo), 0)
        self.assertEqual(len(converter.meta_converter.tensor_memo), 0)

    def test_no_active_mode(self):
        with FakeTensorMode() as mode:
            x = torch.empty(2, 2, device="cpu")
            y = torch.empty(2, 2, device="cpu")

        out = x + y
        self.assertEqual(mode, out.fake_mode)
        self.assertTrue(isinstance(out, FakeTensor))
        self.assertEqual(out.device.type, "cpu")

    def test_separate_mode_error(self):
        with FakeTensorMode():
            x = torch.empty(2, 2, device="cpu")
        with FakeTensorMode():
            y = torch.empty(2, 2, device="cpu")
        self.assertRaises(Exception, lambda: x, y)

    def test_no_ref_cycle(self):
        x = torch.rand([4])
        mode = FakeTensorMode()
        y = mode.from_tensor(x)
        self.assertEqual(len(mode.fake_tensor_converter.tensor_memo), 1)
        mode_weak = weakref.ref(mode)
        y_weak = weakref.ref(mode)
        del mode
        del y
        gc.collect()
        assert mode_weak() is None
        assert y_weak() is None


class FakeTensorOperatorInvariants(TestCase):
    @staticmethod
    def get_aten_op(schema):
        namespace, name = schema.name.split("::")
        overload = schema.overload_name if schema.overload_name else "default"
        assert namespace == "aten"
        return getattr(getattr(torch.ops.aten, name), overload)

    @staticmethod
    def get_all_aten_schemas():
        for schema in torch._C._jit_get_all_schemas():
            namespace = schema.name.split("::")[0]
            if namespace != "aten":
                continue
            yield schema

    def test_non_kwarg_only_device(self):
        for schema in self.get_all_aten_schemas():
            ten_type = torch._C.TensorType.get()
            if not any(
                contains_type(arg.type, ten_type)
                for arg in itertools.chain(schema.arguments, schema.returns)
            ):
                continue

            opt_device = torch._C.OptionalType(torch._C.DeviceObjType.get())
            has_non_kwarg_device = any(
                not arg.kwarg_only and arg.type.isSubtypeOf(opt_device)
                for arg in schema.arguments
            )
            if has_non_kwarg_device:
                self.assertTrue(
                    self.get_aten_op(schema) in torch._subclasses.fake_tensor._device_not_kwarg_ops
                )

    def test_tensor_constructors_all_have_kwarg_device(self):
        for schema in self.get_all_aten_schemas():
            op = self.get_aten_op(schema)
            if not torch._subclasses.fake_tensor._is_tensor_constructor(op):
                continue

            opt_device = torch._C.OptionalType(torch._C.DeviceObjType.get())
            has_kwarg_device = any(
                arg.kwarg_only and arg.type.isSubtypeOf(opt_device)
                for arg in schema.arguments
            )

            self.assertTrue(
                has_kwarg_device or op == torch.ops.aten._list_to_tensor.default
            )

    @unittest.expectedFailure
    def test_sparse_new(self):
        with FakeTensorMode():
            indices = torch.randn(1, 1, dtype=torch.int64)
            values = torch.randn(1)
            extra = (2,)
            sparse = torch.randn(1).to_sparse()
            # This used to segfault, now it does not, but it still raises an
            # error
            sparse2 = sparse.new(indices, values, extra)

    def test_like_ops(self):
        for schema in self.get_all_aten_schemas():
            if "_like" == schema.name[-5:]:
                op = self.get_aten_op(schema)
                self.assertIn(op, torch._subclasses.fake_tensor._like_tensor_constructors)


def _collect_twice():
    # A memoized fake that another memoized fake's TensorImpl refers to (as
    # its .grad or its base) is a root for the collection that frees that one.
    gc.collect()
    gc.collect()


def _live_finalizers():
    # live weakref.finalize objects: a conversion must not add one
    return sum(isinstance(o, weakref.finalize) and o.alive for o in gc.get_objects())


def _conversion_on_stack():
    """Whether a frame of meta_utils.py or fake_tensor.py is on the current stack."""
    files = {
        sys.modules["torch._subclasses.meta_utils"].__file__,
        sys.modules["torch._subclasses.fake_tensor"].__file__,
    }
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in files:
            return True
        frame = frame.f_back
    return False


class _ConversionCycle:
    """Garbage that only the cycle collector frees; its __del__ logs where that happened."""

    def __init__(self, payload, log):
        self.payload = payload
        self.log = log
        self.me = self

    def __del__(self):
        self.log.append(_conversion_on_stack())


def _collect_inside(convert, box):
    """Drop the only reference to box's payload as cyclic garbage, then run `convert()` with
    the collector set to fire at the first allocation inside meta_utils.py or fake_tensor.py,
    so that the payload dies while a conversion is running. Returns (result of convert, log of
    the garbage's __del__)."""
    log = []
    gc.collect()
    was_enabled = gc.isenabled()
    threshold = gc.get_threshold()
    gc.disable()

    # Armed from the first converter frame: armed earlier, Python < 3.11 (whose frames are
    # allocated objects) collects while still calling into the converter, outside it.
    def arm_in_converter(frame, event, arg):
        if event == "call" and _conversion_on_stack():
            sys.setprofile(None)
            gc.set_threshold(1)
            gc.enable()

    try:
        _ConversionCycle(box.pop(), log)
        sys.setprofile(arm_in_converter)
        out = convert()
    finally:
        sys.setprofile(None)
        gc.set_threshold(*threshold)
        if was_enabled:
            gc.enable()
        else:
            gc.disable()
    return out, log


def _run_bounded(test, fn, timeout=300):
    """Run fn in a daemon thread so that a deadlock fails the test instead of hanging it."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: B902 - handed back to the test thread
            box["error"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    test.assertFalse(worker.is_alive(), "conversion did not finish (deadlock?)")
    if "error" in box:
        raise box["error"]
    return box["result"]


class WeakMemoMetaConverterTest(TestCase):
    def test_hit_returns_same_meta(self):
        x = torch.randn(3, 2)
        mc = MetaConverter()
        m = mc(x)
        self.assertTrue(m.is_meta)
        self.assertIs(mc(x), m)
        self.assertEqual(len(mc.tensor_memo), 1)

    def test_dead_tensor_leaves_memo_without_gc(self):
        mc = MetaConverter()
        gc.disable()
        try:
            x = torch.randn(4, 3)
            v = x[1]
            mx, mv = mc(x), mc(v)
            self.assertEqual(len(mc.tensor_memo), 2)
            del v
            self.assertEqual(len(mc.tensor_memo), 1)
            del x
            self.assertEqual(len(mc.tensor_memo), 0)
        finally:
            gc.enable()

    def test_memo_does_not_keep_tensor_alive(self):
        mc = MetaConverter()
        x = torch.randn(3)
        m = mc(x)
        x_ref = weakref.ref(x)
        del x
        self.assertIsNone(x_ref())
        self.assertTrue(m.is_meta)

    def test_storage_memo_is_dict_keyed_by_storage_weak_ref(self):
        mc = MetaConverter()
        x = torch.randn(4, 3)
        v = x[2:]
        mc(x)
        mc(v)
        self.assertIsInstance(mc.storage_memo, dict)
        self.assertEqual(len(mc.storage_memo), 1)
        for key in mc.storage_memo:
            self.assertIsInstance(key, StorageWeakRef)

    def test_expired_storages_leave_storage_memo_on_check(self):
        mc = MetaConverter()
        x = torch.randn(2, 2, 2)
        y = torch.randn(4, 2)
        y.set_(x.storage())
        mc(x)
        mc(y)
        self.assertEqual(len(mc.storage_memo), 1)
        del x
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), 1)  # y still holds the storage
        del y
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), 0)
        self.assertEqual(len(mc.tensor_memo), 0)

    def test_conversion_registers_no_finalizer(self):
        mc = MetaConverter()
        tensors = [torch.randn(3) for _ in range(20)]
        tensors += [t[1:] for t in tensors[:5]]
        before = _live_finalizers()
        metas = [mc(t) for t in tensors]
        self.assertEqual(len(metas), 25)
        self.assertEqual(_live_finalizers(), before)

    def test_dead_converter_leaves_nothing_on_live_tensor(self):
        x = torch.randn(3)
        v = x[1:]
        refs_x, refs_v = weakref.getweakrefcount(x), weakref.getweakrefcount(v)
        finalizers = _live_finalizers()
        mc = MetaConverter()
        metas = (mc(x), mc(v), mc(x))
        del mc, metas
        gc.collect()
        self.assertEqual(weakref.getweakrefcount(x), refs_x)
        self.assertEqual(weakref.getweakrefcount(v), refs_v)
        self.assertEqual(_live_finalizers(), finalizers)

    def test_removed_storage_queue_names_the_sweep(self):
        mc = MetaConverter()
        with self.assertRaisesRegex(AttributeError, "check_for_expired_weak_storages"):
            mc.maybe_storages_to_delete

    def test_conj_input_left_unconverted_by_call(self):
        # MetaConverter.__call__ gives conj tensors back as they are (its fallbacks cannot run them)
        xc = torch.randn(3, dtype=torch.complex64).conj()
        mc = MetaConverter()
        self.assertIs(mc(xc), xc)
        self.assertEqual(mc.miss, 1)

    @parametrize("bit", ["conj", "neg"])
    def test_conj_and_neg_bits_preserved(self, bit):
        x = torch.randn(3, dtype=torch.complex64)
        xb = x.conj() if bit == "conj" else torch._neg_view(x)
        is_set = torch.Tensor.is_conj if bit == "conj" else torch.Tensor.is_neg
        mc = MetaConverter()
        m = mc.meta_tensor(xb)
        self.assertTrue(m.is_meta)
        self.assertTrue(is_set(m))
        self.assertFalse(is_set(mc.meta_tensor(x)))


instantiate_parametrized_tests(WeakMemoMetaConverterTest)


class WeakMemoFakeTensorConverterTest(TestCase):
    def test_hit_returns_same_fake(self):
        x = torch.randn(2, 3)
        mode = FakeTensorMode()
        f = mode.from_tensor(x)
        self.assertIsInstance(f, FakeTensor)
        self.assertIs(mode.from_tensor(x), f)
        self.assertEqual(len(mode.fake_tensor_converter.tensor_memo), 1)

    def test_memo_contains_converted_tensor(self):
        x, y = torch.randn(3), torch.randn(3)
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        f = mode.from_tensor(x)
        self.assertTrue(x in conv.tensor_memo)
        self.assertFalse(y in conv.tensor_memo)
        self.assertIs(f.fake_mode, mode)

    def test_set_tensor_memo_makes_the_next_conversion_a_hit(self):
        x = torch.randn(2)
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        fake = conv.from_meta_and_device(mode, torch.empty(2, device="meta"), torch.device("cpu"))
        conv.set_tensor_memo(x, fake)
        self.assertIs(mode.from_tensor(x), fake)

    def test_weak_tensor_ref_key_is_deprecated_and_finds_no_fake(self):
        x = torch.randn(2)
        mode = FakeTensorMode()
        mode.from_tensor(x)
        with self.assertWarnsRegex(DeprecationWarning, "keyed by the tensor itself"):
            key = torch._subclasses.fake_tensor.WeakTensorRefKey(x)
        self.assertIs(key.ten(), x)
        self.assertIsNone(mode.fake_tensor_converter.tensor_memo.get(key))

    def test_memo_holds_fake_weakly(self):
        x = torch.randn(3)
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        f = mode.from_tensor(x)
        f_ref = weakref.ref(f)
        del f
        gc.collect()
        self.assertIsNone(f_ref())
        self.assertEqual(len(conv.tensor_memo), 0)
        self.assertFalse(x in conv.tensor_memo)

    def test_dead_tensor_leaves_memo_without_gc(self):
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        gc.disable()
        try:
            x = torch.randn(4, 3)
            v = x[1:]
            fx, fv = mode.from_tensor(x), mode.from_tensor(v)
            self.assertEqual(len(conv.tensor_memo), 2)
            # the view's fake is made from its base's fake (an autograd view of it), so
            # the meta converter converted the base x only
            self.assertEqual(len(conv.meta_converter.tensor_memo), 1)
            self.assertIn(x, conv.meta_converter.tensor_memo)
            del v
            self.assertEqual(len(conv.tensor_memo), 1)
            self.assertEqual(len(conv.meta_converter.tensor_memo), 1)
            del x
            self.assertEqual(len(conv.tensor_memo), 0)
            self.assertEqual(len(conv.meta_converter.tensor_memo), 0)
        finally:
            gc.enable()

    def test_mode_does_not_keep_tensor_alive(self):
        mode = FakeTensorMode()
        x = torch.randn(3)
        f = mode.from_tensor(x)
        x_ref = weakref.ref(x)
        del x
        self.assertIsNone(x_ref())
        self.assertIsInstance(f, FakeTensor)

    def test_conversion_registers_no_finalizer(self):
        mode = FakeTensorMode()
        tensors = [torch.randn(3) for _ in range(20)]
        tensors += [t[1:] for t in tensors[:5]]
        p = torch.nn.Parameter(torch.randn(2))
        p.grad = torch.randn(2)
        tensors.append(p)
        before = _live_finalizers()
        fakes = [mode.from_tensor(t) for t in tensors]
        fakes += [mode.from_tensor(t) for t in tensors]
        self.assertEqual(_live_finalizers(), before)

    def test_dead_mode_leaves_nothing_on_live_tensor(self):
        x = torch.randn(3)
        refs = weakref.getweakrefcount(x)
        finalizers = _live_finalizers()
        mode = FakeTensorMode()
        f = mode.from_tensor(x)
        g = mode.from_tensor(x)
        del f, g, mode
        gc.collect()
        self.assertEqual(weakref.getweakrefcount(x), refs)
        self.assertEqual(_live_finalizers(), finalizers)

    def test_mode_freed_after_memo_hit(self):
        x = torch.randn(4)
        mode = FakeTensorMode()
        f = mode.from_tensor(x)
        g = mode.from_tensor(x)
        self.assertIs(f, g)
        mode_ref, fake_ref = weakref.ref(mode), weakref.ref(f)
        del f, g, mode
        gc.collect()
        self.assertIsNone(fake_ref())
        self.assertIsNone(mode_ref())
        self.assertEqual(x.shape, (4,))

    def test_mode_freed_without_memo_hit(self):
        x = torch.randn(4)
        mode = FakeTensorMode()
        f = mode.from_tensor(x)
        mode_ref, fake_ref = weakref.ref(mode), weakref.ref(f)
        del f, mode
        gc.collect()
        self.assertIsNone(fake_ref())
        self.assertIsNone(mode_ref())

    def test_mode_freed_after_hits_on_parameter_and_grad(self):
        p = torch.nn.Parameter(torch.randn(3))
        p.grad = torch.randn(3)
        mode = FakeTensorMode()
        fp = mode.from_tensor(p)
        self.assertIs(mode.from_tensor(p), fp)
        self.assertIs(mode.from_tensor(p.grad), fp.grad)
        mode_ref = weakref.ref(mode)
        del fp, mode
        _collect_twice()
        self.assertIsNone(mode_ref())

    def test_parameter_hit_returns_same_fake(self):
        p = torch.nn.Parameter(torch.randn(3, 2))
        mode = FakeTensorMode()
        fp = mode.from_tensor(p)
        self.assertIsInstance(fp, FakeTensor)
        self.assertIsInstance(fp, torch.nn.Parameter)
        self.assertIs(mode.from_tensor(p), fp)

    def test_fake_grad_kept_only_by_cpp_is_returned_on_hit(self):
        p = torch.nn.Parameter(torch.randn(3, 2))
        p.grad = torch.randn(3, 2)
        mode = FakeTensorMode()
        fp = mode.from_tensor(p)
        g = fp.grad
        self.assertIsInstance(g, FakeTensor)
        self.assertEqual(g.shape, p.grad.shape)
        del g  # the fake grad now lives only through fp's C++ grad slot
        g2 = mode.from_tensor(p.grad)
        self.assertIs(g2, fp.grad)
        self.assertIs(g2.fake_mode, mode)
        with mode:
            out = g2 * 2 + fp
        self.assertIsInstance(out, FakeTensor)
        self.assertEqual(out.shape, (3, 2))
        del g2, out
        self.assertIs(mode.from_tensor(p.grad), fp.grad)

    def test_fake_grad_from_hit_survives_grad_reset(self):
        p = torch.nn.Parameter(torch.randn(3, 2))
        p.grad = torch.randn(3, 2)
        mode = FakeTensorMode()
        fp = mode.from_tensor(p)
        g = mode.from_tensor(p.grad)  # a hit on a fake that only C++ kept alive
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fp.grad = None  # C++ lets go: g must own its tensor now
            junk = [torch.empty(3, 2) for _ in range(10)]
            with mode:
                out = g * 2
        self.assertEqual([str(w.message) for w in caught if "Deallocating" in str(w.message)], [])
        self.assertIsInstance(g, FakeTensor)
        self.assertIs(g.fake_mode, mode)
        self.assertEqual(g.shape, (3, 2))
        self.assertEqual(out.shape, (3, 2))
        self.assertEqual(len(junk), 10)

    def test_storage_entries_expire_after_tensors_die(self):
        mode = FakeTensorMode()
        mc = mode.fake_tensor_converter.meta_converter
        x = torch.randn(4, 4)
        views = [x[1:], x[:, 2], x.t()]
        y = torch.randn(3)
        fakes = [mode.from_tensor(t) for t in [x, y] + views]
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), 2)
        del x, y, views
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), 0)
        self.assertEqual(len(fakes), 5)


class WeakMemoConversionResultTest(TestCase):
    def _check_same_metadata(self, fake, real):
        self.assertIsInstance(fake, FakeTensor)
        self.assertEqual(fake.dtype, real.dtype)
        self.assertEqual(fake.device, real.device)
        self.assertEqual(fake.size(), real.size())
        self.assertEqual(fake.stride(), real.stride())
        self.assertEqual(fake.storage_offset(), real.storage_offset())
        self.assertEqual(fake.requires_grad, real.requires_grad)
        self.assertEqual(fake.is_leaf, real.is_leaf)

    def test_metadata_of_plain_and_view_tensors(self):
        base = torch.randn(5, 6)
        reals = [
            base,
            base[1:, 2:],
            base.t(),
            base[:, 3],
            torch.arange(12).view(3, 4)[::2],
            torch.empty(0, 3, dtype=torch.float64),
            torch.zeros((), dtype=torch.int32),
            torch.randn(2, 3, 4).permute(2, 0, 1),
        ]
        mode = FakeTensorMode()
        for real in reals:
            self._check_same_metadata(mode.from_tensor(real), real)

    def test_leaf_requires_grad_preserved(self):
        x = torch.randn(3, requires_grad=True)
        f = FakeTensorMode().from_tensor(x)
        self._check_same_metadata(f, x)
        self.assertTrue(f.requires_grad)
        self.assertTrue(f.is_leaf)

    def test_non_leaf_requires_grad_stays_non_leaf_in_meta_conversion(self):
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        m = MetaConverter()(y)
        self.assertTrue(m.is_meta)
        self.assertTrue(m.requires_grad)
        self.assertFalse(m.is_leaf)

    def test_non_leaf_requires_grad_converts_to_fake_requiring_grad(self):
        # the fake of a non-leaf requires grad, as the non-leaf
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        f = FakeTensorMode().from_tensor(y)
        self.assertIsInstance(f, FakeTensor)
        self.assertTrue(f.requires_grad)
        self.assertEqual(f.shape, y.shape)

    def test_parameter_stays_parameter(self):
        p = torch.nn.Parameter(torch.randn(4, 2))
        q = torch.nn.Parameter(torch.randn(2), requires_grad=False)
        mode = FakeTensorMode()
        fp, fq = mode.from_tensor(p), mode.from_tensor(q)
        self.assertIsInstance(fp, torch.nn.Parameter)
        self.assertIsInstance(fq, torch.nn.Parameter)
        self._check_same_metadata(fp, p)
        self.assertFalse(fq.requires_grad)
        self.assertFalse(isinstance(mode.from_tensor(torch.randn(2)), torch.nn.Parameter))

    def test_grad_converted_to_fake(self):
        p = torch.nn.Parameter(torch.randn(4, 2))
        p.grad = torch.randn(4, 2).t().contiguous().t()
        mode = FakeTensorMode()
        fp = mode.from_tensor(p)
        self.assertIsInstance(fp.grad, FakeTensor)
        self.assertIs(fp.grad.fake_mode, mode)
        self._check_same_metadata(fp.grad, p.grad)

    def test_views_converted_together_share_fake_storage(self):
        x = torch.randn(4, 4)
        v = x[1:, 1:]
        w = x.t()
        mode = FakeTensorMode()
        fx, fv, fw = mode.from_tensor(x), mode.from_tensor(v), mode.from_tensor(w)
        self.assertEqual(torch._C._storage_id(fx), torch._C._storage_id(fv))
        self.assertEqual(torch._C._storage_id(fx), torch._C._storage_id(fw))
        self.assertNotEqual(torch._C._storage_id(fx), torch._C._storage_id(mode.from_tensor(torch.randn(4))))
        self._check_same_metadata(fv, v)

    def test_set_storage_tensors_converted_together_share_fake_storage(self):
        x = torch.randn(2, 2, 2)
        y = torch.randn(4, 2)
        y.set_(x.storage())  # shares x's storage without being a view of it
        mode = FakeTensorMode()
        fx, fy = mode.from_tensor(x), mode.from_tensor(y)
        self.assertEqual(torch._C._storage_id(fx), torch._C._storage_id(fy))
        self._check_same_metadata(fy, y)

    def test_view_shares_storage_after_base_fake_died(self):
        x = torch.randn(2, 2, 2)
        y = x[0]
        mode = FakeTensorMode()
        fx = mode.from_tensor(x)
        sid = torch._C._storage_id(fx)
        del fx
        gc.collect()
        self.assertFalse(x in mode.fake_tensor_converter.tensor_memo)
        self.assertEqual(torch._C._storage_id(mode.from_tensor(y)), sid)


class WeakMemoRobustnessTest(TestCase):
    def test_gc_inside_mode_conversion_keeps_memo_consistent(self):
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        keep = [torch.randn(3) for _ in range(5)]
        keep_fakes = [mode.from_tensor(t) for t in keep]
        doomed_base = torch.randn(40, 3)
        doomed = [torch.randn(3) for _ in range(200)] + [doomed_base[i] for i in range(40)]
        doomed_fakes = [mode.from_tensor(t) for t in doomed]
        del doomed_base
        y = torch.randn(6, 4)
        yv = y[1:]

        box = [(doomed, doomed_fakes)]
        del doomed, doomed_fakes
        fyv, log = _run_bounded(
            self, lambda: _collect_inside(lambda: mode.from_tensor(yv), box)
        )
        self.assertEqual(log, [True], "the garbage was not collected inside the conversion")
        # the fake of the view yv is an autograd view of the fake of its base y, which it
        # keeps alive: both are memoized; the meta converter converted y only (the view's
        # fake is made from y's fake, not from a meta of yv)
        self.assertEqual(len(conv.tensor_memo), len(keep) + 2)
        self.assertIs(conv.tensor_memo.get(y), fyv._base)
        self.assertEqual(len(conv.meta_converter.tensor_memo), len(keep) + 1)
        self.assertIn(y, conv.meta_converter.tensor_memo)
        conv.meta_converter.check_for_expired_weak_storages()
        self.assertEqual(len(conv.meta_converter.storage_memo), len(keep) + 1)
        for t, f in zip(keep, keep_fakes):
            self.assertIs(mode.from_tensor(t), f)
        self.assertIs(mode.from_tensor(yv), fyv)
        self.assertEqual(torch._C._storage_id(mode.from_tensor(y)), torch._C._storage_id(fyv))
        self.assertEqual(fyv.storage_offset(), 4)
        self.assertIsInstance(mode.from_tensor(torch.randn(2)), FakeTensor)

    def test_gc_inside_meta_conversion_keeps_memo_consistent(self):
        mc = MetaConverter()
        keep = [torch.randn(3) for _ in range(5)]
        keep_metas = [mc(t) for t in keep]
        doomed = [torch.randn(3) for _ in range(300)]
        doomed_metas = [mc(t) for t in doomed]
        y = torch.randn(6, 4)
        yv = y[1:]

        box = [(doomed, doomed_metas)]
        del doomed, doomed_metas
        myv, log = _run_bounded(self, lambda: _collect_inside(lambda: mc(yv), box))
        self.assertEqual(log, [True], "the garbage was not collected inside the conversion")
        self.assertEqual(len(mc.tensor_memo), len(keep) + 2)
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), len(keep) + 1)
        for t, m in zip(keep, keep_metas):
            self.assertIs(mc(t), m)
        self.assertIs(mc(yv), myv)
        self.assertTrue(mc(torch.randn(2)).is_meta)

    def test_racing_conversions_of_one_tensor_return_the_memoized_fake(self):
        # A thread held inside its conversion (after its memo miss) while another thread
        # converts the same tensor must get the fake the memo kept, not a second one.
        mode = FakeTensorMode()
        x = torch.randn(3)
        held, other_done = threading.Event(), threading.Event()
        meta_tensor = MetaConverter.meta_tensor

        def hold_first_thread(mc, t, *args, **kwargs):
            if threading.current_thread().name == "held" and not held.is_set():
                held.set()
                other_done.wait(60)
            return meta_tensor(mc, t, *args, **kwargs)

        results = {}

        def convert():
            results["held"] = mode.from_tensor(x)

        with unittest.mock.patch.object(MetaConverter, "meta_tensor", hold_first_thread):
            thread = threading.Thread(target=convert, name="held")
            thread.start()
            try:
                self.assertTrue(held.wait(60))
                other = mode.from_tensor(x)
            finally:
                other_done.set()
                thread.join(60)
        self.assertIs(results["held"], other)
        self.assertIs(mode.from_tensor(x), other)
        self.assertEqual(len(mode.fake_tensor_converter.tensor_memo), 1)

    def test_interpreter_exit_with_live_modes_is_silent(self):
        script = textwrap.dedent(
            """
            import torch
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch._subclasses.meta_utils import MetaConverter

            modes = [FakeTensorMode() for _ in range(3)]
            tensors = [torch.randn(4, 3) for _ in range(100)]
            views = [t[1:] for t in tensors[:20]]
            params = []
            for _ in range(5):
                p = torch.nn.Parameter(torch.randn(3))
                p.grad = torch.randn(3)
                params.append(p)
            fakes = []
            for m in modes:
                for t in tensors + views + params:
                    fakes.append(m.from_tensor(t))
                    fakes.append(m.from_tensor(t))
                with m:
                    consts = [torch.tensor(2.0) for _ in range(5)]
                m.keep = (consts, fakes[-3:])  # mode -> fakes -> mode cycle
            mc = MetaConverter()
            metas = [mc(t) for t in tensors + views]
            print("done")
            """
        )
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
        )
        self.assertEqual(proc.stderr, "")
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(proc.stdout, "done\n")


def _link(kind, mode, fake):
    """Make another tensor's TensorImpl refer to fake, as user code does; returns
    that tensor and a function reading fake back from it."""
    if kind == "view":
        return fake[1:], lambda holder: holder._base
    if kind == "saved":
        weight = torch.ones_like(fake, requires_grad=True)
        return weight * fake, lambda holder: holder.grad_fn._saved_other
    holder = mode.from_tensor(torch.zeros(fake.shape))
    holder.grad = fake
    return holder, lambda holder: holder.grad


_LINK_KINDS = ["view", "saved", "grad"]

# Threads share one mode over the same tensors; each links the fake it gets to
# another tensor, drops the fake, converts again and drops the link at times.
_LINK_STRESS = inspect.getsource(_link) + textwrap.dedent(
    """
    import sys, threading, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    kind, n_threads, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode = FakeTensorMode()
    reals = [torch.randn(16) for _ in range(64)]
    wrong, errors = [], []

    def work(k):
        try:
            for i in range(rounds):
                t = reals[(i * 7 + k) % len(reals)]
                fake = mode.from_tensor(t)
                holder = read = None
                if kind != "none":
                    holder, read = _link(kind, mode, fake)
                del fake
                again = mode.from_tensor(t)
                if read is not None and again is not read(holder):
                    wrong.append(i)
                if i % 2:
                    del holder
                (again * 2).sum()
                del again
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(f"wrong={len(wrong)} errors={len(errors)}", errors[:3])
    """
)


def _run_link_stress(kind, n_threads, rounds=200):
    """The stress above in a fresh process: (exit status, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LINK_STRESS, kind, str(n_threads), str(rounds)],
        capture_output=True, text=True, timeout=600,
    )
    return proc.returncode, proc.stdout, proc.stderr


class MemoizedFakeOwnershipTest(TestCase):
    """A memo hands out fakes whose TensorImpl other tensors may refer to
    after the user dropped them; the fake must stay a usable Python object."""

    def _linked(self, kind):
        t = torch.randn(4)
        mode = FakeTensorMode()
        holder, read = _link(kind, mode, mode.from_tensor(t))
        return t, mode, holder, read

    @parametrize("kind", _LINK_KINDS)
    def test_hit_returns_the_fake_a_link_holds(self, kind):
        t, mode, holder, read = self._linked(kind)
        again = mode.from_tensor(t)
        self.assertIs(again, read(holder))
        del holder
        gc.collect()
        self.assertIs(mode.from_tensor(t), again)
        self.assertEqual((again * 2).shape, t.shape)

    @parametrize("kind", _LINK_KINDS)
    def test_hit_stays_usable_after_the_link_dies(self, kind):
        # the hit must not hand out a PyObject that C++ frees with the link
        t, mode, holder, read = self._linked(kind)
        again = mode.from_tensor(t)
        del holder
        gc.collect()
        self.assertEqual(again.shape, t.shape)
        self.assertEqual((again * 2).shape, t.shape)

    @parametrize("kind", _LINK_KINDS)
    def test_mode_and_fakes_freed_once_the_user_drops_them(self, kind):
        t, mode, holder, read = self._linked(kind)
        mode_ref, fake_ref = weakref.ref(mode), weakref.ref(read(holder))
        del mode, holder, read
        _collect_twice()
        self.assertIsNone(mode_ref())
        self.assertIsNone(fake_ref())
        self.assertIsNotNone(t)

    @parametrize("kind", _LINK_KINDS)
    def test_hit_in_one_thread_while_another_drops_the_link(self, kind):
        t, mode, holder, read = self._linked(kind)
        linked = read(holder)
        linked_ref = weakref.ref(linked)
        del linked
        hit, dropped = threading.Event(), threading.Event()
        box = {}

        def worker():
            box["fake"] = mode.from_tensor(t)
            hit.set()
            dropped.wait(60)
            box["shape"] = (box["fake"] + 1).shape

        thread = threading.Thread(target=worker)
        thread.start()
        self.assertTrue(hit.wait(60))
        del holder
        gc.collect()
        dropped.set()
        thread.join(60)
        self.assertIs(box["fake"], linked_ref())
        self.assertEqual(box["shape"], t.shape)

    @parametrize("kind", _LINK_KINDS)
    def test_link_dropped_in_another_thread_before_the_hit(self, kind):
        t, mode, holder, read = self._linked(kind)
        linked_ref = weakref.ref(read(holder))
        box = {"holder": holder}
        del holder
        thread = threading.Thread(target=box.clear)
        thread.start()
        thread.join(60)
        again = mode.from_tensor(t)
        self.assertIs(again, linked_ref())
        self.assertEqual((again * 2).shape, t.shape)

    @parametrize("n_threads", [4, 8])
    @parametrize("kind", _LINK_KINDS + ["none"])
    def test_threads_converting_linked_fakes_do_not_crash(self, kind, n_threads):
        status, out, err = _run_link_stress(kind, n_threads)
        self.assertEqual(status, 0, err[-2000:])
        self.assertNotIn("live PyObject references", err)
        counts = dict(item.split("=") for item in out.split()[:2])
        self.assertEqual(counts["wrong"], "0", out)
        self.assertEqual(counts["errors"], "0", out)


instantiate_parametrized_tests(MemoizedFakeOwnershipTest)


class DeepCopyTest(TestCase):
    def _check_copy(self, fake, copied):
        self.assertIsInstance(copied, FakeTensor)
        self.assertIsNot(copied, fake)
        self.assertEqual(
            (copied.dtype, copied.shape, copied.stride(), copied.device),
            (fake.dtype, fake.shape, fake.stride(), fake.device),
        )
        self.assertEqual(copied.requires_grad, fake.requires_grad)
        self.assertEqual(
            isinstance(copied, torch.nn.Parameter), isinstance(fake, torch.nn.Parameter)
        )
        self.assertIsInstance(copied.fake_mode, FakeTensorMode)
        self.assertIsNot(copied.fake_mode, fake.fake_mode)
        with copied.fake_mode:
            self.assertEqual((copied * 2).shape, fake.shape)
            self.assertIsInstance(torch.ones(2) + 1, FakeTensor)

    def test_copies_fake_of_real_tensor(self):
        t = torch.randn(4, 3)
        fake = FakeTensorMode().from_tensor(t)
        self._check_copy(fake, copy.deepcopy(fake))

    def test_copies_fake_made_inside_the_mode(self):
        with FakeTensorMode():
            fake = torch.empty(2, 5).t()
        self._check_copy(fake, copy.deepcopy(fake))

    def test_copies_fake_parameter(self):
        fake = FakeTensorMode().from_tensor(torch.nn.Parameter(torch.randn(3)))
        self._check_copy(fake, copy.deepcopy(fake))

    def test_copies_module_with_fake_parameters(self):
        mode = FakeTensorMode()
        module = torch.nn.Linear(3, 2)
        for name, p in list(module.named_parameters()):
            setattr(module, name, mode.from_tensor(p))
        copied = copy.deepcopy(module)
        for (_, p), (_, q) in zip(module.named_parameters(), copied.named_parameters()):
            self._check_copy(p, q)
        self.assertIs(copied.weight.fake_mode, copied.bias.fake_mode)

    def test_copied_mode_memoizes_its_own_fakes(self):
        t = torch.randn(3)
        mode = FakeTensorMode()
        mode.from_tensor(t)
        copied = copy.deepcopy(mode)
        self.assertIsInstance(copied, FakeTensorMode)
        fake = copied.from_tensor(t)
        self.assertIs(fake.fake_mode, copied)
        self.assertIs(copied.from_tensor(t), fake)

    def test_copied_meta_converter_starts_empty(self):
        t = torch.randn(3)
        mc = MetaConverter()
        meta = mc(t)
        copied = copy.deepcopy(mc)
        self.assertIsInstance(copied, MetaConverter)
        self.assertEqual((len(copied.tensor_memo), len(copied.storage_memo)), (0, 0))
        copied_meta = copied(t)
        self.assertTrue(copied_meta.is_meta)
        self.assertIs(copied(t), copied_meta)
        self.assertIs(mc(t), meta)

    def test_copy_keeps_no_real_tensor_alive(self):
        t = torch.randn(3)
        t_ref = weakref.ref(t)
        mode = FakeTensorMode()
        copied = copy.deepcopy((mode, mode.from_tensor(t)))
        del t, mode
        _collect_twice()
        self.assertIsNone(t_ref())
        self.assertIsInstance(copied[1], FakeTensor)


class WeakMemoConstantTest(TestCase):
    def test_live_constant_has_mapping_entry(self):
        with FakeTensorMode() as mode:
            c = torch.tensor(2.0)
        self.assertIsInstance(c, FakeTensor)
        self.assertIsNotNone(c.constant)
        self.assertEqual(len(mode.fake_tensor_converter.constant_storage_mapping), 1)

    def test_dead_constant_leaves_mapping(self):
        with FakeTensorMode() as mode:
            c = torch.tensor(2.0)
        mapping = mode.fake_tensor_converter.constant_storage_mapping
        self.assertEqual(len(mapping), 1)
        del c
        gc.collect()
        self.assertEqual(len(mapping), 0)

    def test_mapping_bounded_by_live_constants(self):
        mode = FakeTensorMode()
        live = []
        with mode:
            for i in range(60):
                c = torch.tensor(float(i))
                if i % 20 == 0:
                    live.append(c)
            del c
        gc.collect()
        self.assertTrue(all(c.constant is not None for c in live))
        self.assertEqual(len(mode.fake_tensor_converter.constant_storage_mapping), len(live))


class _FunctionCallRecorder(TorchFunctionMode):
    def __init__(self):
        self.log = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


class MemoHitTorchFunctionModeTest(TestCase):
    def test_memo_hit_on_parameter_invisible_to_torch_function_mode(self):
        p = torch.nn.Parameter(torch.randn(3))
        mode = FakeTensorMode()
        fake = mode.from_tensor(p)
        recorder = _FunctionCallRecorder()
        with recorder:
            hit = mode.from_tensor(p)
        self.assertIs(hit, fake)
        self.assertEqual(recorder.log, [])

    def test_memo_hit_under_nested_modes_invisible_and_stack_restored(self):
        x = torch.randn(3)
        mode = FakeTensorMode()
        fake = mode.from_tensor(x)
        outer, inner = _FunctionCallRecorder(), _FunctionCallRecorder()
        with outer, inner:
            hit = mode.from_tensor(x)
            stack = torch.overrides._get_current_function_mode_stack()
            torch.neg(x)
        self.assertIs(hit, fake)
        self.assertEqual(stack, [outer, inner])
        # neg reaches both (inner runs it with outer active); the hit reaches neither
        self.assertEqual(inner.log, ["neg"])
        self.assertEqual(outer.log, ["neg"])


class StorageSweepBoundTest(TestCase):
    """Dead storage_memo entries stay bounded by the live ones plus a constant, whichever way
    the tensors die (storages give no death callback, so the memo is swept)."""

    @parametrize("via", ["meta_converter", "fake_mode"])
    def test_dead_storage_entries_bounded_for_dying_tensors(self, via):
        mode = FakeTensorMode()
        mc = mode.fake_tensor_converter.meta_converter
        convert = mc if via == "meta_converter" else mode.from_tensor
        for _ in range(10000):
            convert(torch.empty(2))
        self.assertEqual(len(mc.tensor_memo), 0)
        self.assertEqual(len(mode.fake_tensor_converter.tensor_memo), 0)
        self.assertLessEqual(len(mc.storage_memo), 400)

    def _storage_backlog(self, mc, n):
        """Convert n tensors, let them die and keep their storages alive through set_()."""
        holders = []
        for _ in range(n):
            a = torch.randn(2)
            mc(a)
            holders.append(torch.empty(0).set_(a.storage()))
            del a
        self.assertEqual(len(mc.tensor_memo), 0)
        mc.check_for_expired_weak_storages()
        self.assertEqual(len(mc.storage_memo), n)
        return holders

    def test_dead_storage_entries_bounded_after_backlog_dies(self):
        mc = MetaConverter()
        holders = self._storage_backlog(mc, 800)
        del holders
        for _ in range(1200):
            mc(torch.empty(2))
        self.assertLessEqual(len(mc.storage_memo), 400)

    def test_dead_storage_entries_bounded_right_after_live_tensors_die(self):
        mc = MetaConverter()
        live = [torch.randn(2) for _ in range(500)]
        metas = [mc(t) for t in live]
        self.assertEqual(len(mc.storage_memo), 500)
        del live, metas
        kept = []
        worst = 0
        for _ in range(200):
            kept.append(torch.randn(2))
            mc(kept[-1])
            # entries = live + dead, and dead <= live + 128
            worst = max(worst, len(mc.storage_memo) - (2 * len(kept) + 128))
        self.assertLessEqual(worst, 0)

    def test_sweeps_scan_amortized_constant_entries_per_conversion(self):
        mc = MetaConverter()
        scanned = []
        sweep = mc.check_for_expired_weak_storages

        def counting_sweep():
            scanned.append(len(mc.storage_memo))
            sweep()

        mc.check_for_expired_weak_storages = counting_sweep
        kept = []
        for i in range(6000):
            t = torch.randn(2)
            mc(t)
            if i % 3 == 0:
                kept.append(t)
            if i % 3000 == 2999:
                kept.clear()
        self.assertGreater(len(scanned), 0)
        self.assertLessEqual(sum(scanned), 4 * 6000)


instantiate_parametrized_tests(StorageSweepBoundTest)


# Operators without a Meta kernel, so that FakeTensorMode runs their CPU kernels through the
# fallback.  Some kernels record weak references to the real tensors they see and return, which
# lets the tests check that no real temporary outlives the call.

_kernel_refs = []


def _note_kernel_tensors(*tensors):
    _kernel_refs.extend(weakref.ref(t) for t in tensors)


def _kernel_mutate_(x):
    _note_kernel_tensors(x)
    return x.add_(1)


def _kernel_pair(x):
    fresh = x + 1
    _note_kernel_tensors(x, fresh)
    return x, fresh


def _kernel_fresh(x):
    out = x.sum(0, dtype=torch.float64)
    _note_kernel_tensors(x, out)
    return out


def _kernel_narrow_view(x):
    out = x.narrow(0, 1, 2)
    _note_kernel_tensors(x, out)
    return out


def _kernel_normalized(x):
    # fails on the values: zero-filled stand-ins are an invalid input
    _note_kernel_tensors(x)
    total = x.sum()
    if total == 0:
        raise RuntimeError("normalized: the values sum to zero")
    return x / total


def _kernel_raw_alias(x):
    return torch.empty(0, dtype=x.dtype).set_(x.storage(), x.storage_offset(), (x.numel(),), (1,))


_known_tensor = torch.randn(3, 2)

_fallback_lib = torch.library.Library("fallback_test", "DEF")

for _schema, _kernel in [
    ("mutate_(Tensor(a!) x) -> Tensor(a!)", _kernel_mutate_),
    ("pair(Tensor(a!) x) -> (Tensor(a!), Tensor)", _kernel_pair),
    ("twice(Tensor(a!) x) -> (Tensor(a!), Tensor(a!))", lambda x: (x, x)),
    ("nested(Tensor(a!) x, Tensor y) -> Tensor[]", lambda x, y: [y * 2, x, x + y]),
    ("second(Tensor x, Tensor(b!) y) -> Tensor(b!)", lambda x, y: y.mul_(2)),
    ("fresh(Tensor x) -> Tensor", _kernel_fresh),
    ("add(Tensor x, Tensor y) -> Tensor", lambda x, y: x + y),
    ("row(Tensor x, int i) -> Tensor", lambda x, i: x.select(0, i).clone()),
    ("known_output(Tensor x) -> Tensor", lambda x: _known_tensor),
    ("narrow_view(Tensor(a) x) -> Tensor(a)", _kernel_narrow_view),
    ("transpose_view(Tensor(a) x) -> Tensor(a)", lambda x: x.transpose(0, 1)),
    ("second_view(Tensor x, Tensor(b) y) -> Tensor(b)", lambda x, y: y.narrow(0, 1, 2)),
    ("int_view(Tensor(a) x) -> Tensor(a)", lambda x: x.view(torch.int32)),
    ("detached(Tensor(a) x) -> Tensor(a)", lambda x: x.detach()),
    ("raw_alias(Tensor(a) x) -> Tensor(a)", _kernel_raw_alias),
    ("as_real(Tensor(a) x) -> Tensor(a)", lambda x: torch.view_as_real(x)),
    ("view_in_tuple(Tensor(a) x) -> (Tensor, Tensor(a))", lambda x: (x + 1, x[0])),
    ("normalized(Tensor x) -> Tensor", _kernel_normalized),
    ("positives(Tensor x) -> int", lambda x: int((x > 0).sum())),
    ("fresh_and_flag(Tensor x) -> (Tensor, bool)", lambda x: (x + 1, bool(x.any()))),
]:
    _fallback_lib.define(_schema)
    _fallback_lib.impl(_schema.split("(")[0], _kernel, "CPU")

_fallback_ops = torch.ops.fallback_test


class FallbackKernelReturnedInputTest(TestCase):
    def test_returned_input_is_its_fake(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(3, 2))
        with mode:
            out = _fallback_ops.mutate_(fx)
        self.assertIs(out, fx)

    def test_returned_input_made_under_mode_is_its_fake(self):
        with FakeTensorMode():
            fx = torch.zeros(3, 2)
            out = _fallback_ops.mutate_(fx)
        self.assertIs(out, fx)

    def test_returned_input_in_tuple_next_to_fresh_output(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(3, 2))
        with mode:
            out = _fallback_ops.pair(fx)
        self.assertIsInstance(out, tuple)
        self.assertIs(out[0], fx)
        self.assertIsInstance(out[1], FakeTensor)
        self.assertIsNot(out[1], fx)

    def test_input_returned_twice(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(3, 2))
        with mode:
            a, b = _fallback_ops.twice(fx)
        self.assertIs(a, fx)
        self.assertIs(b, fx)

    def test_returned_input_in_list(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(3, 2))
        fy = mode.from_tensor(torch.randn(3, 2))
        with mode:
            out = _fallback_ops.nested(fx, fy)
        self.assertIsInstance(out, list)
        self.assertEqual(len(out), 3)
        self.assertIs(out[1], fx)
        for fresh in (out[0], out[2]):
            self.assertIsInstance(fresh, FakeTensor)
            self.assertIsNot(fresh, fx)
            self.assertIsNot(fresh, fy)

    def test_returned_second_input_is_its_fake(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(3, 2))
        fy = mode.from_tensor(torch.randn(4))
        with mode:
            out = _fallback_ops.second(fx, fy)
        self.assertIs(out, fy)


class FallbackKernelFreshOutputTest(TestCase):
    def test_fresh_output_is_new_fake_with_real_metadata(self):
        x = torch.randn(4, 3)
        real = _fallback_ops.fresh(x)
        mode = FakeTensorMode()
        fx = mode.from_tensor(x)
        with mode:
            out = _fallback_ops.fresh(fx)
        self.assertIsInstance(out, FakeTensor)
        self.assertIs(out.fake_mode, mode)
        self.assertEqual(out.device, fx.device)
        self.assertEqual((out.dtype, out.shape, out.stride()), (real.dtype, real.shape, real.stride()))
        self.assertFalse(out._is_view())

    def test_tensor_the_mode_converted_before_is_its_fake(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(4, 3))
        known = mode.from_tensor(_known_tensor)
        with mode:
            out = _fallback_ops.known_output(fx)
        self.assertIs(out, known)


def _meta_error_message(op, *args):
    """The error of op on fakes of args when the mode may not fall back."""
    mode = FakeTensorMode(allow_fallback_kernels=False)
    fakes = [mode.from_tensor(a) for a in args]
    try:
        with mode:
            op(*fakes)
    except NotImplementedError as error:
        return str(error)
    raise AssertionError(f"{op} has a Meta kernel")


def _shares_storage(t, inputs):
    return any(t.storage().data_ptr() == i.storage().data_ptr() for i in inputs)


_ALIASING_CASES = {
    "narrow_view": (torch.randn(4, 3),),
    "transpose_view": (torch.randn(4, 3)[1:],),
    "second_view": (torch.randn(4, 3), torch.randn(5, 2)),
    "int_view": (torch.randn(4, 3),),
    "detached": (torch.randn(4, 3, requires_grad=True),),
    "raw_alias": (torch.randn(4, 3),),
    "as_real": (torch.randn(4, 3, dtype=torch.complex64),),
    "view_in_tuple": (torch.randn(4, 3),),
}


class FallbackKernelAliasingOutputTest(TestCase):
    @parametrize("name", list(_ALIASING_CASES))
    def test_output_sharing_input_storage_is_refused_naming_op(self, name):
        op = getattr(_fallback_ops, name)
        inputs = _ALIASING_CASES[name]
        real = op(*inputs)
        last = real[-1] if isinstance(real, tuple) else real
        self.assertTrue(_shares_storage(last, inputs))
        mode = FakeTensorMode()
        fakes = [mode.from_tensor(a) for a in inputs]
        layouts = [(f.shape, f.stride(), f.storage_offset(), f._version) for f in fakes]
        with self.assertRaises(UnsupportedFallbackException) as cm:
            with mode:
                op(*fakes)
        self.assertIsInstance(cm.exception, NotImplementedError)
        self.assertIs(cm.exception.func, op.default)
        message = str(cm.exception)
        self.assertIn(f"FakeTensor fallback for fallback_test.{name}.default", message)
        self.assertIn("shares storage with an input without being that input", message)
        # the cause: the missing Meta kernel that sent the op to the fallback
        self.assertIs(type(cm.exception.__cause__), NotImplementedError)
        self.assertEqual(str(cm.exception.__cause__), _meta_error_message(op, *inputs))
        self.assertEqual([(f.shape, f.stride(), f.storage_offset(), f._version) for f in fakes], layouts)

    def test_refusal_names_the_output(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(4, 3))
        with self.assertRaisesRegex(NotImplementedError, "output 1 of its kernel"):
            with mode:
                _fallback_ops.view_in_tuple(fx)


# arguments on which the real kernel fails whatever the values
_KERNEL_ERROR_CASES = {
    "add": (torch.randn(3, 2), torch.randn(4, 2)),
    "row": (torch.randn(3, 2), 5),
}


class FallbackKernelErrorTest(TestCase):
    @parametrize("name", list(_KERNEL_ERROR_CASES))
    def test_kernel_error_is_the_error_of_the_real_call(self, name):
        op = getattr(_fallback_ops, name)
        args = _KERNEL_ERROR_CASES[name]
        with self.assertRaises(Exception) as real:
            op(*args)
        mode = FakeTensorMode()
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with self.assertRaises(Exception) as fake:
            with mode:
                op(*fake_args)
        self.assertIs(type(fake.exception), type(real.exception))
        self.assertEqual(str(fake.exception), str(real.exception))

    def test_kernel_error_on_the_zeros_is_the_kernel_error(self):
        # the fake cannot tell it from an error of the real call
        mode = FakeTensorMode()
        probs = mode.from_tensor(torch.rand(3, 5))
        with self.assertRaises(Exception) as cm:
            with mode:
                _fallback_ops.normalized(probs)
        self.assertIs(type(cm.exception), RuntimeError)
        self.assertEqual(str(cm.exception), "normalized: the values sum to zero")

    def test_inplace_view_op_never_falls_back(self):
        mode = FakeTensorMode()
        fake = mode.from_tensor(torch.randn(3, 4))
        error = NotImplementedError("orig")
        with self.assertRaises(NotImplementedError) as cm:
            run_fallback_kernel(mode, torch.ops.aten.unsqueeze_.default, (fake, 0), {}, error)
        self.assertIs(cm.exception, error)
        self.assertEqual(fake.size(), (3, 4))
        self.assertEqual(fake.stride(), (4, 1))

    @parametrize("name", ["fresh", "narrow_view", "mutate_"])
    def test_disallowed_fallback_raises_original_error(self, name):
        mode = FakeTensorMode(allow_fallback_kernels=False)
        fx = mode.from_tensor(torch.randn(4, 3))
        with self.assertRaises(NotImplementedError) as cm:
            with mode:
                getattr(_fallback_ops, name)(fx)
        self.assertIn("Could not run", str(cm.exception))
        self.assertIn("Meta", str(cm.exception))
        self.assertIsNone(cm.exception.__cause__)


class FallbackKernelValueOutputTest(TestCase):
    """Values other than tensors that a fallback kernel returns come from the zero-filled
    stand-ins; under throw_on_data_dependent_ops they are refused."""

    def _call(self, op, throw):
        mode = FakeTensorMode(throw_on_data_dependent_ops=throw)
        fx = mode.from_tensor(torch.randn(4, 3).abs() + 1)
        with mode:
            return op(fx)

    @parametrize("name", ["positives", "fresh_and_flag"])
    def test_value_output_is_refused_under_throw_on_data_dependent_ops(self, name):
        with self.assertRaises(DataDependentOutputException) as cm:
            self._call(getattr(_fallback_ops, name), throw=True)
        self.assertIn(name, str(cm.exception))

    def test_value_output_read_from_zeros_without_throw_on_data_dependent_ops(self):
        # as in 1.13.1: the value the kernel computed from the stand-ins
        self.assertEqual(self._call(_fallback_ops.positives, throw=False), 0)
        out, flag = self._call(_fallback_ops.fresh_and_flag, throw=False)
        self.assertIsInstance(out, FakeTensor)
        self.assertIs(flag, False)

    def test_tensor_outputs_are_not_refused_under_throw_on_data_dependent_ops(self):
        out = self._call(_fallback_ops.fresh, throw=True)
        self.assertIsInstance(out, FakeTensor)


class FallbackKernelLifetimeTest(TestCase):
    """No real tensor the kernel saw or made outlives the call, the errors included."""

    def setUp(self):
        _kernel_refs.clear()
        gc.disable()
        self.addCleanup(gc.enable)
        self.addCleanup(_kernel_refs.clear)

    def _check_freed(self, n_seen):
        refs = list(_kernel_refs)
        _kernel_refs.clear()
        self.assertEqual(len(refs), n_seen)
        self.assertEqual([r() is None for r in refs], [True] * n_seen)

    @parametrize("name,n_seen", [("fresh", 2), ("mutate_", 1), ("pair", 2)])
    def test_no_real_temporary_outlives_the_call(self, name, n_seen):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(4, 3))
        with mode:
            out = getattr(_fallback_ops, name)(fx)
        self.assertIsNotNone(out)
        self._check_freed(n_seen)

    @parametrize("name,n_seen", [("narrow_view", 2), ("normalized", 1)])
    def test_no_real_temporary_outlives_an_error(self, name, n_seen):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.rand(4, 3))
        error = None
        # not assertRaises: it clears the traceback's frames, which would hide them
        try:
            with mode:
                getattr(_fallback_ops, name)(fx)
        except RuntimeError as e:  # the refusal, or the kernel's error
            error = e
        self.assertIsNotNone(error)
        self.assertIsNotNone(error.__traceback__)
        self._check_freed(n_seen)


class FallbackKernelLeavesNoCycleTest(TestCase):
    # a cycle through the frames an error holds would be broken by gc, which clears the
    # __dict__ of fakes C++ still keeps alive
    def setUp(self):
        gc.collect()
        gc.disable()
        self.addCleanup(gc.enable)

    def _garbage_of(self, call):
        while gc.collect():
            pass
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            call()
            gc.collect()
            return [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    def test_fallback_call_leaves_no_garbage(self):
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.randn(3))

        def call():
            with mode:
                _fallback_ops.fresh(x)

        self.assertEqual(self._garbage_of(call), [])

    def test_refused_fallback_call_leaves_no_garbage(self):
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.randn(3, 2))

        def call():
            try:
                with mode:
                    _fallback_ops.narrow_view(x)
            except NotImplementedError:
                pass

        self.assertEqual(self._garbage_of(call), [])

    def test_fake_saved_by_autograd_keeps_attributes_through_gc(self):
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.randn(3, requires_grad=True))
        with mode:
            y = x.clone()
            _fallback_ops.fresh(y)
            loss = (y * y).sum()  # autograd saves y: C++ keeps it alive
        del y
        gc.collect()
        with mode:
            (grad,) = torch.autograd.grad(loss, [x])
        self.assertIs(grad.fake_mode, mode)
        self.assertEqual(grad.shape, x.shape)


instantiate_parametrized_tests(FallbackKernelAliasingOutputTest)
instantiate_parametrized_tests(FallbackKernelErrorTest)
instantiate_parametrized_tests(FallbackKernelValueOutputTest)
instantiate_parametrized_tests(FallbackKernelLifetimeTest)


# Fallback kernels that change the metadata of their arguments.

_metadata_lib = torch.library.Library("fallback_metadata_test", "DEF")

for _schema, _kernel in [
    ("column_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     lambda x, out: out.resize_(x.size(0)).copy_(x[:, 0])),
    ("min_out(Tensor x, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!), Tensor(b!))",
     lambda x, values, indices: torch.min(x, 1, out=(values, indices))),
    ("channels_last_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     lambda x, out: out.resize_(x.shape, memory_format=torch.channels_last).copy_(x)),
    ("resize_input(Tensor x) -> Tensor", lambda x: x.resize_(2, 2) + 1),
    ("new_storage_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     lambda x, out: out.set_(torch.zeros(x.size(0)))),
    ("column_out_and_view(Tensor(a) x, *, Tensor(b!) out) -> Tensor(a)",
     lambda x, out: (out.resize_(x.size(0)), x[0])[1]),
    ("transpose_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", lambda x, out: out.t_()),
    ("shift_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     lambda x, out: out.set_(out.storage(), 1, (2,), (1,))),
]:
    _metadata_lib.define(_schema)
    _metadata_lib.impl(_schema.split("(")[0], _kernel, "CPU")

_metadata_ops = torch.ops.fallback_metadata_test


def _geometry(t):
    return (tuple(t.shape), t.stride(), t.storage_offset())


_OUT_CASES = {
    "empty": lambda: torch.empty(0),
    "right_size": lambda: torch.empty(4),
    "larger": lambda: torch.empty(9),
    "offset_view": lambda: torch.empty(5)[2:],
    "strided_view": lambda: torch.empty(3, 2)[:, 0],
}


class FallbackKernelMetadataChangeTest(TestCase):
    @parametrize("case", list(_OUT_CASES))
    def test_out_resize_is_mirrored_as_for_real(self, case):
        x = torch.randn(4, 3)
        real_out = _OUT_CASES[case]()
        _metadata_ops.column_out(x, out=real_out)
        mode = FakeTensorMode()
        fx, fake_out = mode.from_tensor(x), mode.from_tensor(_OUT_CASES[case]())
        with mode:
            result = _metadata_ops.column_out(fx, out=fake_out)
        self.assertIs(result, fake_out)
        self.assertEqual(_geometry(fake_out), _geometry(real_out))
        self.assertEqual(_geometry(fx), _geometry(x))
        self.assertGreaterEqual(fake_out.storage().nbytes(), real_out.storage().nbytes())

    def test_every_resized_out_argument_is_mirrored(self):
        x = torch.randn(5, 6)
        values, indices = torch.empty(0), torch.empty(0, dtype=torch.long)
        _metadata_ops.min_out(x, values=values, indices=indices)
        mode = FakeTensorMode()
        fv = mode.from_tensor(torch.empty(0))
        fi = mode.from_tensor(torch.empty(0, dtype=torch.long))
        with mode:
            out = _metadata_ops.min_out(mode.from_tensor(x), values=fv, indices=fi)
        self.assertIs(out[0], fv)
        self.assertIs(out[1], fi)
        self.assertEqual([_geometry(fv), _geometry(fi)], [_geometry(values), _geometry(indices)])

    def test_out_strides_are_mirrored(self):
        x = torch.randn(2, 3, 4, 5)
        real_out = torch.empty(0)
        _metadata_ops.channels_last_out(x, out=real_out)
        mode = FakeTensorMode()
        fake_out = mode.from_tensor(torch.empty(0))
        with mode:
            _metadata_ops.channels_last_out(mode.from_tensor(x), out=fake_out)
        self.assertEqual(_geometry(fake_out), _geometry(real_out))
        self.assertTrue(fake_out.is_contiguous(memory_format=torch.channels_last))

    def test_resize_of_view_grows_the_storage_its_base_shares(self):
        mode = FakeTensorMode()
        base = mode.from_tensor(torch.empty(5))
        out = base[2:]
        with mode:
            _metadata_ops.column_out(mode.from_tensor(torch.randn(6, 3)), out=out)
        self.assertEqual(_geometry(out), ((6,), (1,), 2))
        self.assertEqual(base.storage().nbytes(), 8 * 4)
        self.assertIs(out._base, base)

    def test_change_of_argument_not_written_by_schema_is_refused(self):
        mode = FakeTensorMode()
        fx = mode.from_tensor(torch.randn(4))
        with self.assertRaises(UnsupportedFallbackException) as cm:
            with mode:
                _metadata_ops.resize_input(fx)
        message = str(cm.exception)
        self.assertIn("FakeTensor fallback for fallback_metadata_test.resize_input.default", message)
        self.assertIn("changed the metadata of argument 'x'", message)
        self.assertIs(type(cm.exception.__cause__), NotImplementedError)
        self.assertEqual(_geometry(fx), ((4,), (1,), 0))

    def test_written_argument_moved_to_another_storage_is_refused(self):
        mode = FakeTensorMode()
        fake_out = mode.from_tensor(torch.empty(0))
        with self.assertRaisesRegex(NotImplementedError, "argument 'out'"):
            with mode:
                _metadata_ops.new_storage_out(mode.from_tensor(torch.randn(4, 3)), out=fake_out)
        self.assertEqual(_geometry(fake_out), ((0,), (1,), 0))

    @parametrize("name,make_out", [
        ("transpose_out", lambda: torch.empty(3, 4)[:, ::2]),
        ("shift_out", lambda: torch.empty(6)[3:]),
    ])
    def test_change_a_fake_layout_cannot_follow_is_refused(self, name, make_out):
        mode = FakeTensorMode()
        fake_out = mode.from_tensor(make_out())
        before = _geometry(fake_out)
        with self.assertRaisesRegex(NotImplementedError, "argument 'out'"):
            with mode:
                getattr(_metadata_ops, name)(mode.from_tensor(torch.randn(4, 3)), out=fake_out)
        self.assertEqual(_geometry(fake_out), before)

    def test_transpose_of_a_dense_out_is_mirrored_as_for_real(self):
        real_out = torch.empty(3, 2)
        _metadata_ops.transpose_out(torch.randn(4, 3), out=real_out)
        mode = FakeTensorMode()
        fake_out = mode.from_tensor(torch.empty(3, 2))
        with mode:
            _metadata_ops.transpose_out(mode.from_tensor(torch.randn(4, 3)), out=fake_out)
        self.assertEqual(_geometry(fake_out), _geometry(real_out))

    def test_refused_call_leaves_written_arguments_unchanged(self):
        mode = FakeTensorMode()
        fake_out = mode.from_tensor(torch.empty(0))
        with self.assertRaisesRegex(NotImplementedError, "shares storage with an input"):
            with mode:
                _metadata_ops.column_out_and_view(mode.from_tensor(torch.randn(4, 3)), out=fake_out)
        self.assertEqual(_geometry(fake_out), ((0,), (1,), 0))


instantiate_parametrized_tests(FallbackKernelMetadataChangeTest)


def _view_of_view_grad():
    # requires_grad set on an intermediate view: z requires grad through it
    x = torch.randn(8)
    y = x.view(2, 4)
    y.requires_grad = True
    return x, y.view(2, 2, 2)


def _channels_last_non_leaf():
    return torch.empty(2, 3, 4, 5, memory_format=torch.channels_last, requires_grad=True) + 2


def _set_with_offset():
    return torch.empty(0).set_(torch.randn(10).storage(), 2, (2, 3), (1, 2))


def _inference_tensor():
    with torch.inference_mode():
        return torch.randn(3, 2)


def _inference_view():
    with torch.inference_mode():
        x = torch.randn(4, 2)
        return x, x[1:]


def _parameter_with_grad():
    p = torch.nn.Parameter(torch.randn(4, 2))
    p.grad = torch.randn(2, 4).t()
    return p


def _leaf_view_of_grad_base():
    x = torch.randn(4, 3, requires_grad=True)
    with torch.no_grad():
        return x, x[1:]


# name -> () -> tensor, or a tuple (converted in order, compared: the last one)
_CONVERSION_CASES = {
    "dense_leaf": lambda: torch.randn(4, 3),
    "leaf_requires_grad": lambda: torch.randn(4, 3, requires_grad=True),
    "non_leaf": lambda: torch.randn(4, 3, requires_grad=True) * 2,
    "parameter": lambda: torch.nn.Parameter(torch.randn(3, 2)),
    "parameter_without_grad_flag": lambda: torch.nn.Parameter(torch.randn(3), requires_grad=False),
    "parameter_with_grad": _parameter_with_grad,
    "channels_last_leaf": lambda: torch.empty(2, 3, 4, 5, memory_format=torch.channels_last),
    "channels_last_non_leaf": _channels_last_non_leaf,
    "strided_leaf_with_gaps": lambda: torch.empty_strided((2, 3), (4, 1)),
    "view_of_leaf": lambda: (lambda x: (x, x[1:, 1:]))(torch.randn(4, 3)),
    "view_of_grad_leaf": lambda: (lambda x: (x, x.t()))(torch.randn(4, 3, requires_grad=True)),
    "view_of_view_grad_on_intermediate": _view_of_view_grad,
    "leaf_view_of_grad_base": _leaf_view_of_grad_base,
    "expand_zero_stride": lambda: torch.randn(3, 1).expand(3, 4),
    "set_with_offset": _set_with_offset,
    "empty": lambda: torch.empty(0, 3, dtype=torch.float64),
    "zero_dim": lambda: torch.zeros((), dtype=torch.int32),
    "inference": _inference_tensor,
    "inference_view": _inference_view,
    "complex_view_as_real": lambda: (lambda x: (x, torch.view_as_real(x)))(
        torch.randn(3, dtype=torch.complex64)
    ),
    "sparse": lambda: torch.randn(3, 4).to_sparse(),
}


def _make_case(name):
    made = _CONVERSION_CASES[name]()
    return made if isinstance(made, tuple) else (made,)


def _grad_of(t):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor")
        return t.grad


def _is_leaf_of(t):
    try:
        return t.is_leaf
    except RuntimeError:  # inference tensors may not say
        return None


class ConversionFieldsTest(TestCase):
    """Every field of a conversion against the real tensor, for MetaConverter's metas and
    FakeTensorConverter's fakes."""

    def _check_fields(self, out, real, converted, expect_device, autograd_fields=True):
        self.assertEqual(out.dtype, real.dtype)
        self.assertEqual(out.device, expect_device(real))
        self.assertEqual(out.shape, real.shape)
        self.assertEqual(out.is_sparse, real.is_sparse)
        if not real.is_sparse:
            self.assertEqual(out.stride(), real.stride())
            self.assertEqual(out.storage_offset(), real.storage_offset())
        self.assertEqual(out.requires_grad, real.requires_grad)
        self.assertEqual(out.is_conj(), real.is_conj())
        self.assertEqual(out.is_neg(), real.is_neg())
        self.assertEqual(out.is_inference(), real.is_inference())
        self.assertEqual(
            isinstance(out, torch.nn.Parameter), isinstance(real, torch.nn.Parameter)
        )
        if _grad_of(real) is None:
            self.assertIsNone(_grad_of(out))
        else:
            self._check_fields(
                _grad_of(out), real.grad, converted, expect_device, autograd_fields
            )
        if autograd_fields:
            self.assertEqual(_is_leaf_of(out), _is_leaf_of(real))
            self.assertEqual(out._is_view(), real._is_view())
            if real._is_view():
                self.assertIs(out._base, converted(real._base))
                self._check_fields(out._base, real._base, converted, expect_device)

    @parametrize("case", sorted(_CONVERSION_CASES), name_fn=lambda c: c)
    def test_meta_matches_real(self, case):
        tensors = _make_case(case)
        mc = MetaConverter()
        outs = [mc(t) for t in tensors]
        self.assertTrue(outs[-1].is_meta)
        # converted(t) is a memo hit: bases are compared by identity
        self._check_fields(outs[-1], tensors[-1], mc, lambda t: torch.device("meta"))

    @parametrize("case", sorted(_CONVERSION_CASES), name_fn=lambda c: c)
    def test_fake_matches_real(self, case):
        # is_leaf, _is_view() and _base too: FakeTensor wrapping detaches, so fakes of views
        # and non-leaves are made through autograd from the fake of the base or leaf
        tensors = _make_case(case)
        mode = FakeTensorMode()
        outs = [mode.from_tensor(t) for t in tensors]
        self.assertIsInstance(outs[-1], FakeTensor)
        self._check_fields(outs[-1], tensors[-1], mode.from_tensor, lambda t: t.device)

    def test_autograd_grad_through_meta_of_channels_last_non_leaf(self):
        y = _channels_last_non_leaf()
        mc = MetaConverter()
        m = mc(y)
        (grad,) = torch.autograd.grad(m.sum(), m)
        self.assertEqual(grad.shape, y.shape)

    def test_meta_of_fresh_tensor_and_its_views_count_writes_as_the_real_ones(self):
        x, z = _view_of_view_grad()
        mc = MetaConverter()
        mx, mz = mc(x), mc(z)
        self.assertIs(mz._base, mx)
        self.assertEqual((mx._version, mz._version), (x._version, z._version))
        with torch.no_grad():
            z.add_(1)
            mz.add_(1)
        self.assertEqual((mx._version, mz._version), (x._version, z._version))

    @parametrize("bit", ["conj", "neg"])
    def test_view_lacking_the_bit_of_its_base(self, bit):
        # conj() of a conj tensor is a view without the bit: its meta, a view
        # of the base's meta, must not keep the base's
        x = torch.randn(3, dtype=torch.complex64)
        set_bit = torch._C._set_conj if bit == "conj" else torch._C._set_neg
        is_set = torch.Tensor.is_conj if bit == "conj" else torch.Tensor.is_neg
        set_bit(x, True)
        v = x.conj() if bit == "conj" else torch._neg_view(x)
        self.assertTrue(v._is_view())
        self.assertFalse(is_set(v))
        m = MetaConverter().meta_tensor(v)
        self.assertTrue(is_set(m._base))
        self.assertFalse(is_set(m))


instantiate_parametrized_tests(ConversionFieldsTest)


class _DispatchRecorder(TorchDispatchMode):
    def __init__(self):
        self.log = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.log.append(str(func))
        return func(*args, **(kwargs or {}))


class DenseLeafConversionTest(TestCase):
    def _convert(self, tensors):
        mode = FakeTensorMode()
        return mode, [mode.from_tensor(t) for t in tensors]

    @parametrize("layout", ["contiguous", "channels_last", "transposed"])
    @parametrize("first", ["tensor", "tensor_set_onto_its_storage"])
    def test_dense_tensors_on_one_storage_share_its_meta(self, layout, first):
        x = torch.randn(2, 3, 4, 5)
        if layout == "channels_last":
            x = x.to(memory_format=torch.channels_last)
        elif layout == "transposed":
            x = torch.empty_strided((2, 3, 4, 5), (1, 2, 6, 24)).normal_()
        on_x = torch.empty(0).set_(x.storage(), 0, x.shape, x.stride())
        tensors = [x, on_x] if first == "tensor" else [on_x, x]
        mode, fakes = self._convert(tensors)
        mc = mode.fake_tensor_converter.meta_converter
        self.assertEqual(torch._C._storage_id(fakes[0]), torch._C._storage_id(fakes[1]))
        for fake, t in zip(fakes, tensors):
            self.assertEqual((fake.shape, fake.stride()), (t.shape, t.stride()))
        self.assertEqual((mc.hit, mc.arg_cnt, len(mc.storage_memo)), (2, 2, 1))
        # each starts a counter of its own at 0, as a fresh tensor does (the set_
        # that placed it on the meta storage is not counted); like the real
        # ones, the two do not share it
        self.assertEqual([fake._version for fake in fakes], [0, 0])
        with mode, torch.no_grad():
            fakes[0].add_(1)
        self.assertEqual([fake._version for fake in fakes], [1, 0])

    def test_conversion_under_its_own_mode_makes_plain_fakes(self):
        # the meta factory and the wrapper must not reach the mode (they would make fakes of
        # fakes, on the meta device)
        mode = FakeTensorMode()
        x, p = torch.randn(3), torch.nn.Parameter(torch.randn(2))
        with mode:
            fx, fp = mode.from_tensor(x), mode.from_tensor(p)
        for f in (fx, fp):
            self.assertIsInstance(f, FakeTensor)
            self.assertIs(f.fake_mode, mode)
            self.assertEqual(f.device, torch.device("cpu"))
        self.assertIsInstance(fp, torch.nn.Parameter)
        self.assertIs(mode.from_tensor(x), fx)

    def test_conversion_invisible_to_torch_dispatch_mode(self):
        mode = FakeTensorMode()
        p = torch.nn.Parameter(torch.randn(3))
        recorder = _DispatchRecorder()
        with recorder:
            f = mode.from_tensor(p)
        self.assertEqual(recorder.log, [])
        self.assertIsInstance(f, FakeTensor)


instantiate_parametrized_tests(DenseLeafConversionTest)


def _grad_fn_names(t):
    names, node = [], t.grad_fn
    while node is not None and len(names) < 12:
        names.append(node.name())
        node = node.next_functions[0][0] if node.next_functions else None
    return names


_GRAD_BASE = torch.randn(4, 6, requires_grad=True)


_VIEWS_OF_GRAD_BASE = {
    "slice": lambda b: b[1:],
    "slice_t": lambda b: b[1:].t(),
    "select": lambda b: b[1],
    "view_of_view": lambda b: b.view(24).view(2, 12),
    "expand": lambda b: b[:1].expand(3, 6),
    "split": lambda b: b.split([1, 3])[1],
    "reshape": lambda b: b.reshape(24)[2:],
}


class FakeViewConversionTest(TestCase):
    """Fakes of views are autograd views of the fake of their base, and fakes of non-leaves
    have a grad_fn, as the real tensors (FakeTensorConverter)."""

    def _check_autograd_fields(self, fake, real):
        self.assertIsInstance(fake, FakeTensor)
        self.assertEqual(
            (fake.shape, fake.stride(), fake.storage_offset(), fake.dtype, fake.device),
            (real.shape, real.stride(), real.storage_offset(), real.dtype, real.device),
        )
        self.assertEqual(fake.requires_grad, real.requires_grad)
        self.assertEqual(fake.is_leaf, real.is_leaf)
        self.assertEqual(fake._is_view(), real._is_view())
        self.assertEqual(fake.grad_fn is None, real.grad_fn is None)

    def test_fake_of_view_is_view_of_base_fake(self):
        x = torch.randn(4, 6)
        fv = self._fake_of_view_checked(x, x[1:, ::2])
        self.assertEqual(torch._C._storage_id(fv), torch._C._storage_id(fv._base))

    def test_views_of_one_base_share_its_fake(self):
        mode = FakeTensorMode()
        x = torch.randn(4, 6)
        f0, f1 = mode.from_tensor(x[0]), mode.from_tensor(x[1])
        self.assertIsNotNone(f0._base)
        self.assertIs(f0._base, f1._base)

    def test_in_place_on_base_fake_bumps_view_fake_version(self):
        mode = FakeTensorMode()
        x = torch.randn(4, 6)
        fv = mode.from_tensor(x[1])
        fx = mode.from_tensor(x)
        before = fv._version
        with mode:
            fx.add_(1)
        self.assertEqual(fv._version, before + 1)
        with mode:
            fv.mul_(2)
        self.assertEqual(fx._version, before + 2)

    def _fake_of_view_checked(self, base, view):
        """The fake of view (its fields checked against it) and the fake of base, its _base."""
        mode = FakeTensorMode()
        fake = mode.from_tensor(view)
        self._check_autograd_fields(fake, view)
        self.assertIs(fake._base, mode.from_tensor(base))
        return fake

    def test_view_of_view_with_grad_on_intermediate(self):
        x, z = _view_of_view_grad()
        fz = self._fake_of_view_checked(x, z)
        self.assertFalse(fz.is_leaf)
        self.assertFalse(fz._base.requires_grad)
        (grad,) = torch.autograd.grad(fz.sum(), fz)
        self.assertEqual(grad.shape, z.shape)

    def test_leaf_view_of_base_requiring_grad(self):
        x, v = _leaf_view_of_grad_base()
        self.assertTrue(self._fake_of_view_checked(x, v).is_leaf)

    @parametrize("transposed", [False, True])
    def test_non_view_non_leaf_has_grad_fn_and_its_layout(self, transposed):
        w = torch.randn(3, 4, requires_grad=True)
        y = (w.t() if transposed else w) * 2
        mode = FakeTensorMode()
        fy = mode.from_tensor(y)
        self._check_autograd_fields(fy, y)
        self.assertIsNotNone(fy.grad_fn)
        self.assertEqual(fy._version, y._version)
        (grad,) = torch.autograd.grad((fy * 3).sum(), fy)
        self.assertIsInstance(grad, FakeTensor)
        self.assertEqual(grad.shape, y.shape)

    def test_backward_through_non_leaf_fake_raises(self):
        y = torch.randn(3, 4, requires_grad=True) * 2
        fy = FakeTensorMode().from_tensor(y)
        with self.assertRaisesRegex(RuntimeError, "backward\\(\\) through the fake of a non-leaf"):
            (fy * 3).sum().backward()

    def test_in_place_op_on_non_leaf_fake_runs_as_on_the_real_tensor(self):
        y = torch.randn(3, 4, requires_grad=True) * 2
        mode = FakeTensorMode()
        fy = mode.from_tensor(y)
        with mode:
            fy.add_(1)
        y.add_(1)
        self.assertEqual(_fields_of(fy), _fields_of(y))

    def test_constant_non_leaf_fake_stays_a_leaf_holding_its_constant(self):
        y = torch.randn(3, requires_grad=True) * 2
        mode = FakeTensorMode()
        fy = mode.fake_tensor_converter(mode, y, make_constant=True)
        self.assertIs(fy.constant, y)
        self.assertTrue(fy.is_leaf)
        self.assertTrue(fy.requires_grad)

    def test_sparse_non_leaf_fake_stays_a_leaf(self):
        y = torch.randn(3, 3).to_sparse().requires_grad_() * 2
        fy = FakeTensorMode().from_tensor(y)
        self.assertTrue(fy.is_sparse)
        self.assertTrue(fy.requires_grad)
        self.assertTrue(fy.is_leaf)

    def test_view_of_non_leaf_is_view_of_its_fake_on_its_storage(self):
        y = torch.randn(3, 4, requires_grad=True) * 2
        v = y[1:]
        mode = FakeTensorMode()
        fv = mode.from_tensor(v)
        self._check_autograd_fields(fv, v)
        fy = mode.from_tensor(y)
        self.assertIs(fv._base, fy)
        self._check_autograd_fields(fy, y)
        self.assertEqual(torch._C._storage_id(fv), torch._C._storage_id(fy))

    def test_grad_through_view_fake_reaches_base_fake(self):
        b = torch.randn(4, 3, requires_grad=True)
        v = b[1:3].t()
        (real_grad,) = torch.autograd.grad(v.sum(), b)
        mode = FakeTensorMode()
        fv, fb = mode.from_tensor(v), mode.from_tensor(b)
        self._check_autograd_fields(fv, v)
        self.assertIs(fv._base, fb)
        (grad,) = torch.autograd.grad(fv.sum(), fb)
        self.assertIsInstance(grad, FakeTensor)
        self.assertEqual((grad.shape, grad.stride()), (real_grad.shape, real_grad.stride()))

    def test_backward_through_view_fake_fills_base_fake_grad(self):
        b = torch.randn(4, 3, requires_grad=True)
        mode = FakeTensorMode()
        fv = mode.from_tensor(b[1:])
        fb = mode.from_tensor(b)
        fv.sum().backward()
        self.assertIsInstance(fb.grad, FakeTensor)
        self.assertEqual(fb.grad.shape, b.shape)

    def test_dtype_view_is_view_of_base_fake(self):
        c = torch.randn(3, dtype=torch.complex64)
        self._fake_of_view_checked(c, torch.view_as_real(c))

    def test_view_fake_and_its_base_fake_die_when_dropped(self):
        mode = FakeTensorMode()
        conv = mode.fake_tensor_converter
        x = torch.randn(4, 6)
        v = x[1]
        fv = mode.from_tensor(v)
        fv_ref, fx_ref = weakref.ref(fv), weakref.ref(fv._base)
        self.assertEqual(len(conv.tensor_memo), 2)
        del fv
        gc.collect()
        self.assertIsNone(fv_ref())
        # the base's fake was shared with the view's: it goes with the next collection
        gc.collect()
        self.assertIsNone(fx_ref())
        self.assertEqual(len(conv.tensor_memo), 0)
        # converted again: a new pair, the real tensors untouched
        fv = mode.from_tensor(v)
        self.assertIs(fv._base, mode.from_tensor(x))
        self.assertEqual(len(conv.tensor_memo), 2)

    def test_mode_freed_after_view_conversions(self):
        mode = FakeTensorMode()
        b = torch.randn(4, 3, requires_grad=True)
        fakes = [mode.from_tensor(t) for t in (b[1:], b[1:].t(), torch.randn(2, 2) * b[0, 0])]
        fakes[0].sum().backward()
        mode_ref = weakref.ref(mode)
        del mode, fakes
        _collect_twice()
        self.assertIsNone(mode_ref())

    def test_user_dispatch_mode_sees_no_conversion_op_and_stacks_restored(self):
        # the view of the base's fake is made by dispatching the view op on it with the
        # converting mode innermost: a user's mode active during from_tensor does not see it
        mode = FakeTensorMode()
        x = torch.randn(4, 6, requires_grad=True)
        fx = mode.from_tensor(x)
        dispatch_recorder, function_recorder = _OpLog(), _FunctionCallRecorder()
        with function_recorder, dispatch_recorder:
            fv = mode.from_tensor(x[1:].t())
            fn = mode.from_tensor(x * 2)
            dispatch_stack = torch.utils._python_dispatch._get_current_dispatch_mode_stack()
            function_stack = torch.overrides._get_current_function_mode_stack()
        self.assertIs(fv._base, fx)
        self.assertIsNotNone(fn.grad_fn)
        self.assertEqual(dispatch_stack, [dispatch_recorder])
        self.assertEqual(function_stack, [function_recorder])
        ops = [func for func in dispatch_recorder.log if func is not torch.ops.prim.device.default]
        self.assertEqual(ops, [torch.ops.aten.slice.Tensor, torch.ops.aten.t.default,
                               torch.ops.aten.mul.Tensor])  # the test's own

    def test_conversion_under_another_fake_mode_makes_the_converting_modes_fakes(self):
        mode, other = FakeTensorMode(), FakeTensorMode()
        x = torch.randn(4, 6, requires_grad=True)
        v, n = x[1:], x * 2
        with other:
            fv, fn = mode.from_tensor(v), mode.from_tensor(n)
        self.assertIs(fv.fake_mode, mode)
        self.assertIs(fn.fake_mode, mode)
        self.assertIs(fv._base, mode.from_tensor(x))
        self.assertEqual(_fields_of(fv), _fields_of(v))
        self.assertEqual(_fields_of(fn), _fields_of(n))

    def test_traced_graph_of_view_inputs_has_no_conversion_ops(self):
        def step(a, b, r):
            out = (a * 2).sum() + b.sum() + r.sum()
            return [out] + list(torch.autograd.grad(out, [a]))

        def targets(*inputs):
            gm = make_fx(step, tracing_mode="fake")(*inputs)
            return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]

        x = torch.randn(4, 6, requires_grad=True)
        c = torch.randn(3, dtype=torch.complex64)
        views = (x[1:].t(), x.detach()[::2], torch.view_as_real(c))
        self.assertTrue(all(v._is_view() for v in views))
        dense = [v.detach().clone().requires_grad_(v.requires_grad) for v in views]
        self.assertEqual(targets(*views), targets(*dense))

    def test_view_conversion_inside_fake_mode_then_ops_stay_fake(self):
        mode = FakeTensorMode()
        v = torch.randn(4, 6)[1:]
        with mode:
            fv = mode.from_tensor(v)
            out = fv * 2
        self.assertTrue(fv._is_view())
        self.assertIsInstance(out, FakeTensor)
        self.assertEqual(torch.utils._python_dispatch._get_current_dispatch_mode_stack(), [])

    def test_view_conversion_under_no_dispatch(self):
        mode = FakeTensorMode()
        x = torch.randn(4, 6)
        with no_dispatch():
            fv = mode.from_tensor(x[1:])
        self.assertIsInstance(fv, FakeTensor)
        self.assertTrue(fv._is_view())
        self.assertIs(fv._base, mode.from_tensor(x))


instantiate_parametrized_tests(FakeViewConversionTest)


class FakeViewGradFnKindTest(TestCase):
    """The fake of a view of a base requiring grad is made by as_strided on the base's fake, so
    its grad_fn is one AsStridedBackward0 (as later torch's), whatever view ops made the real
    view, and backward through it reaches the base's fake."""

    @parametrize("kind", list(_VIEWS_OF_GRAD_BASE))
    def test_fake_of_view_has_as_strided_grad_fn(self, kind):
        v = _VIEWS_OF_GRAD_BASE[kind](_GRAD_BASE)
        mode = FakeTensorMode()
        fv = mode.from_tensor(v)
        self.assertEqual(_grad_fn_names(fv), ["AsStridedBackward0", "torch::autograd::AccumulateGrad"])
        self.assertEqual((fv.shape, fv.stride(), fv.storage_offset()),
                         (v.shape, v.stride(), v.storage_offset()))
        fb = mode.from_tensor(_GRAD_BASE)
        self.assertIs(fv._base, fb)
        (grad,) = torch.autograd.grad(fv.sum(), fb)
        self.assertIsInstance(grad, FakeTensor)
        self.assertEqual(grad.shape, _GRAD_BASE.shape)


instantiate_parametrized_tests(FakeViewGradFnKindTest)


_SYMBOLIC_LAYOUT_CASES = {
    "view_of_base_requiring_grad": lambda x: x[1:],
    "view_of_non_leaf": lambda x: (x * 2).t(),
    "expanded_non_leaf": lambda x: (x * 2).sum(0).expand(3, 6),
    "transposed_dense_non_leaf": lambda x: (x * 2).t().clone(),
}


def _size_hints(t):
    def hint(s):
        if isinstance(s, torch.SymIntNode):
            return int(s.get_pyobj().shape_env.size_hint(s.get_pyobj().expr))
        return s

    return (tuple(map(hint, t.shape)), tuple(map(hint, t.stride())), hint(t.storage_offset()))


class FakeViewSymbolicAndConstantConversionTest(TestCase):
    """Views converted with a ShapeEnv (make_fx's tracing_mode="symbolic") or as constants (what
    FakeTensorMode folds) get the fakes 1.13.1 gives them: leaves with the view's layout, on the
    storage of their base's meta.  Non-leaves converted with a ShapeEnv have a grad_fn."""

    def _symbolic(self, *tensors):
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        mode, shape_env = FakeTensorMode(), ShapeEnv()
        return mode, [mode.from_tensor(t, shape_env=shape_env) for t in tensors]

    def test_symbolic_view_is_leaf_with_symbolic_sizes_on_base_storage(self):
        x = torch.randn(4, 6)
        v = x[1:, ::2]
        mode, (fv, fx) = self._symbolic(v, x)
        self.assertFalse(fv._is_view())
        self.assertTrue(all(isinstance(s, torch.SymIntNode) for s in fv.shape))
        self.assertEqual(torch._C._storage_id(fv), torch._C._storage_id(fx))

    @parametrize("case", list(_SYMBOLIC_LAYOUT_CASES))
    def test_symbolic_fake_has_the_layout_of_the_real_tensor(self, case):
        x = torch.randn(4, 6, requires_grad=True)
        real = _SYMBOLIC_LAYOUT_CASES[case](x)
        mode, (fake,) = self._symbolic(real)
        self.assertEqual(_size_hints(fake), (tuple(real.shape), real.stride(), real.storage_offset()))

    @parametrize("transposed", [False, True])
    def test_symbolic_non_view_non_leaf_has_grad_fn_and_its_layout(self, transposed):
        w = torch.randn(3, 4, requires_grad=True)
        y = (w.t() if transposed else w) * 2
        mode, (fy,) = self._symbolic(y)
        self.assertFalse(fy.is_leaf)
        self.assertIsNotNone(fy.grad_fn)
        self.assertEqual(_size_hints(fy), (tuple(y.shape), y.stride(), y.storage_offset()))
        (grad,) = torch.autograd.grad(fy.sum(), fy)
        self.assertEqual(len(grad.shape), 2)

    def test_constant_view_is_constant_leaf(self):
        x = torch.arange(6.0)
        v = x[2:]
        mode = FakeTensorMode()
        fv = mode.fake_tensor_converter(mode, v, make_constant=True)
        self.assertFalse(fv._is_view())
        self.assertIs(fv.constant, v)
        self.assertEqual((fv.shape, fv.stride(), fv.storage_offset()),
                         (v.shape, v.stride(), v.storage_offset()))

    def test_view_op_on_constant_fake_folds_to_constant(self):
        mode = FakeTensorMode()
        with mode:
            c = torch.tensor(3.0)
            v = c.view(1)
        self.assertEqual(v.constant, torch.tensor([3.0]))
        self.assertEqual(v.shape, (1,))


instantiate_parametrized_tests(FakeViewSymbolicAndConstantConversionTest)


# Conversions from several threads and from code that runs inside a conversion.


def _make_real_cases():
    """name -> a fresh real tensor of each kind the converter makes in its own way."""
    def view():
        return torch.randn(6, 5)[1:4, ::2]

    def view_of_view():
        return torch.randn(6, 5)[1:].t()[2]

    def dtype_view():
        return torch.randn(6, 4).view(torch.int32)[::2]

    def complex_view():
        return torch.view_as_real(torch.randn(3, dtype=torch.complex64))

    def non_leaf_view():
        x = torch.randn(6, 5, requires_grad=True)
        return (x * 2)[1:, 2]

    def view_of_view_with_grad():
        return torch.randn(6, 5)[1:].requires_grad_()[::2]

    def non_leaf():
        return torch.randn(4, 2, requires_grad=True) * 2

    def parameter_with_grad():
        p = torch.nn.Parameter(torch.randn(3, 4))
        p.grad = torch.randn(3, 4)
        return p

    def leaf_with_grad():
        x = torch.randn(5, 2, requires_grad=True)
        x.grad = torch.randn(5, 2)
        return x

    return {f.__name__: f for f in (view, view_of_view, dtype_view, complex_view, non_leaf_view,
                                    view_of_view_with_grad, non_leaf, parameter_with_grad,
                                    leaf_with_grad)}


_REAL_CASES = _make_real_cases()


def _fields_of(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad = t.grad
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.device.type,
            t.requires_grad, t.is_leaf, t._is_view(), t.grad_fn is None,
            None if grad is None else (tuple(grad.shape), grad.stride()))


# Run in a subprocess (a crash fails the test instead of ending the run).  Prints one line of
# counts; fakes die right after their check ("drop") or are kept per thread ("keep").
_THREAD_STRESS = r"""
import random, sys, threading, traceback, warnings
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
warnings.simplefilter("ignore")
n_threads, rounds, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "keep"

def fields(t):
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.device.type,
            t.requires_grad, t.is_leaf, t._is_view(), t.grad_fn is None,
            None if t.grad is None else tuple(t.grad.shape))

def tensors(seed):
    rng = random.Random(seed)
    bases = [torch.randn(6, 5) for _ in range(20)]
    x = torch.randn(6, 5, requires_grad=True)
    non_leaves = [x * 2, x[1:] + 1]
    ts = list(bases)
    while len(ts) < 300:
        k, b = len(ts) % 7, rng.choice(bases)
        if k == 0:
            p = torch.nn.Parameter(torch.randn(3, 4))
            p.grad = torch.randn(3, 4)
            ts.append(p)
        elif k == 1:
            ts.append(b[1:4, ::2])
        elif k == 2:
            ts.append(b.t()[2])
        elif k == 3:
            ts.append(b.view(torch.int32)[::2])
        elif k == 4:
            ts.append(rng.choice(non_leaves)[1:, 1:3])
        elif k == 5:
            ts.append(b[1:].view(25)[3:])
        else:
            y = torch.randn(5, 2, requires_grad=True)
            y.grad = torch.randn(5, 2)
            ts.append(y)
    return ts

errors = wrong = duplicates = conversions = 0
for rnd in range(rounds):
    ts = tensors(rnd)
    want = [fields(t) for t in ts]
    mode = FakeTensorMode()
    kept = [dict() for _ in range(n_threads)]
    counts = [[0, 0, 0] for _ in range(n_threads)]

    def work(i):
        order = list(range(len(ts)))
        random.Random(rnd * 100 + i).shuffle(order)
        c = counts[i]
        for j in order:
            try:
                f = mode.from_tensor(ts[j])
                c[0] += 1
                if not isinstance(f, FakeTensor) or fields(f) != want[j] or (
                        ts[j]._is_view() and f._base is not mode.from_tensor(ts[j]._base)):
                    c[2] += 1
                    print("wrong", j, fields(f), want[j], file=sys.stderr)
                if keep:
                    kept[i][j] = f
            except Exception:
                c[1] += 1
                traceback.print_exc()
            f = None

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in counts:
        conversions, errors, wrong = conversions + c[0], errors + c[1], wrong + c[2]
    if keep:
        duplicates += sum(len({id(k[j]) for k in kept if j in k}) > 1 for j in range(len(ts)))
print(f"conversions={conversions} errors={errors} wrong={wrong} duplicates={duplicates}")
"""


_MAKE_FX_STRESS = r"""
import sys, threading, warnings
import torch
from torch.fx.experimental.proxy_tensor import make_fx
warnings.simplefilter("ignore")
n_threads, traces = int(sys.argv[1]), int(sys.argv[2])
model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
params = [p.detach().requires_grad_() for p in model.parameters()]

def f(w1, b1, w2, b2, x, v):
    h = torch.relu(torch.nn.functional.linear(x, w1, b1))
    out = torch.nn.functional.linear(h, w2, b2).sum(0)
    return out + v.t().reshape(-1)[:3] * x[0, :3]

args = (*params, torch.randn(2, 5), torch.randn(4, 3)[1:])
expected = str(make_fx(f, tracing_mode="fake")(*args).code)
counts = [[0, 0, 0] for _ in range(n_threads)]

def work(c):
    for _ in range(traces):
        try:
            code = str(make_fx(f, tracing_mode="fake")(*args).code)
            c[0] += 1
            c[2] += code != expected
        except Exception:
            c[1] += 1

threads = [threading.Thread(target=work, args=(c,)) for c in counts]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("traces={} errors={} wrong={}".format(*[sum(c[k] for c in counts) for k in range(3)]))
"""


# gc at (nearly) every allocation, and a gc callback that converts another tensor with the
# same mode: conversions inside every window of the conversions running when gc starts.
_REENTRANT_STRESS = r"""
import gc, sys, warnings
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
warnings.simplefilter("ignore")
n = int(sys.argv[1])

def fields(t):
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.device.type,
            t.requires_grad, t.is_leaf, t._is_view(), t.grad_fn is None)

def make(i):
    k, b = i % 6, torch.randn(6, 5)
    if k == 0:
        return b[1:4, ::2]
    if k == 1:
        p = torch.nn.Parameter(torch.randn(3, 4))
        p.grad = torch.randn(3, 4)
        return p
    if k == 2:
        return b.t()[2]
    if k == 3:
        return torch.randn(4, 2, requires_grad=True) * 2
    if k == 4:
        return b.view(torch.int32)[::2]
    return torch.randn(6, 5, requires_grad=True)[1:].view(5, 5)[:, 1]

mode = FakeTensorMode()
counts = {"inner": 0, "inner_wrong": 0, "outer": 0, "outer_wrong": 0, "errors": 0}
busy = []

def convert(t, kind):
    try:
        f = mode.from_tensor(t)
        counts[kind] += 1
        if not isinstance(f, FakeTensor) or fields(f) != fields(t):
            counts[kind + "_wrong"] += 1
    except Exception:
        counts["errors"] += 1

def on_gc(phase, info):
    if phase == "start" and not busy and counts["inner"] < n:
        busy.append(1)
        try:
            convert(make(counts["inner"] + 1), "inner")
        finally:
            busy.pop()

gc.callbacks.append(on_gc)
gc.set_threshold(1, 1, 1)
i = 0
while counts["inner"] < n and i < 20 * n:
    convert(make(i), "outer")
    i += 1
gc.set_threshold(700, 10, 10)
gc.callbacks.remove(on_gc)
print(" ".join(f"{k}={v}" for k, v in counts.items()))
"""


_FIRST_VIEW_CONVERSIONS_STRESS = r"""
import sys, threading
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
n_threads = int(sys.argv[1])
leaf = torch.randn(4, 6, requires_grad=True)
views = [leaf.t(), leaf[0], leaf.unsqueeze(0), leaf.permute(1, 0), leaf.diagonal(),
         leaf.transpose(0, 1), leaf[:1].expand(3, 6), leaf.unfold(0, 2, 1),
         leaf.unsqueeze(0).squeeze(0), leaf.as_strided((2, 2), (1, 1))]
mode = FakeTensorMode()
barrier = threading.Barrier(n_threads)
counts = [[0, 0] for _ in range(n_threads)]

def work(k, c):
    barrier.wait()
    for v in views[k % len(views):] + views[:k % len(views)]:
        try:
            fake = mode.from_tensor(v)
            c[1] += (fake.shape, fake.stride()) != (v.shape, v.stride())
        except Exception:
            c[0] += 1

threads = [threading.Thread(target=work, args=(k, c)) for k, c in enumerate(counts)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"errors={sum(c[0] for c in counts)} wrong={sum(c[1] for c in counts)}")
"""


# A thread switch inside the resolution of aten.as_strided's Python object during the first
# view conversion, where another thread makes its first view conversion: deterministic.
_SWITCH_IN_FIRST_DISPATCH = r"""
import threading, torch, torch._ops
from torch._subclasses.fake_tensor import FakeTensorMode
mode = FakeTensorMode()
original = torch._ops.OpOverloadPacket.__getattr__
counts = {"errors": 0, "wrong": 0, "switched": 0}
views = [torch.randn(4, 6)[1:], torch.randn(5, 4)[1:]]

def convert(v):
    try:
        f = mode.from_tensor(v)
        counts["wrong"] += (f.stride(), f.storage_offset()) != (v.stride(), v.storage_offset())
    except Exception:
        counts["errors"] += 1

def resolving(self, key):
    if self._qualified_op_name == "aten::as_strided" and not counts["switched"]:
        counts["switched"] += 1
        other = threading.Thread(target=convert, args=(views[1],))
        other.start()
        other.join()
    return original(self, key)

torch._ops.OpOverloadPacket.__getattr__ = resolving
convert(views[0])
print(" ".join(f"{k}={v}" for k, v in counts.items()))
"""


def _run_script(test, script, *argv):
    proc = subprocess.run([sys.executable, "-c", script, *map(str, argv)],
                          capture_output=True, text=True, timeout=900)
    test.assertEqual(proc.returncode, 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    return dict(kv.split("=") for kv in proc.stdout.split())


class _OpLog(TorchDispatchMode):
    def __init__(self):
        self.log = []
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.log.append(func)
        self.calls.append((func, args))
        return func(*args, **(kwargs or {}))


class ConversionInsideConversionTest(TestCase):
    """Code that runs in the middle of a view conversion (weakref callbacks, __del__) may
    convert with the same mode and run ops: it sees the modes its caller had, and does not
    change the outer result.  The window is entered deterministically by wrapping the step
    that makes the view of the base's fake."""

    @contextlib.contextmanager
    def _inside_view_step(self, during):
        import torch._subclasses.fake_tensor as fake_tensor
        original = fake_tensor._same_view
        calls = []

        entered = []

        def wrapped(t, base, *geometry):
            if not entered:
                entered.append(t)
                calls.append(during())
            return original(t, base, *geometry)

        with unittest.mock.patch.object(fake_tensor, "_same_view", wrapped):
            yield calls
        self.assertEqual(len(calls), 1)

    @parametrize("inner", list(_REAL_CASES))
    @parametrize("outer", ["view", "dtype_view", "non_leaf_view"])
    def test_conversion_inside_view_conversion_is_correct(self, outer, inner):
        mode = FakeTensorMode()
        real_outer, real_inner = _REAL_CASES[outer](), _REAL_CASES[inner]()
        with self._inside_view_step(lambda: mode.from_tensor(real_inner)) as calls:
            fake_outer = mode.from_tensor(real_outer)
        fake_inner = calls[0]
        self.assertIsInstance(fake_inner, FakeTensor)
        self.assertIsInstance(fake_outer, FakeTensor)
        self.assertEqual(_fields_of(fake_inner), _fields_of(real_inner))
        self.assertEqual(_fields_of(fake_outer), _fields_of(real_outer))
        # the memo keeps the fakes made inside; nothing the converter keeps is a fake's fake
        self.assertIs(mode.from_tensor(real_inner), fake_inner)
        self.assertIs(mode.from_tensor(real_outer), fake_outer)
        if real_inner._is_view():
            self.assertIs(fake_inner._base, mode.from_tensor(real_inner._base))
        metas = mode.fake_tensor_converter.meta_converter.tensor_memo
        for r in (real_outer._base, real_inner._base, real_inner):
            meta = metas.get(r) if r is not None else None
            self.assertNotIsInstance(meta, FakeTensor)

    def test_outer_view_conversion_correct_after_inner_view_conversion(self):
        mode = FakeTensorMode()
        recorder = _OpLog()
        b = torch.randn(6, 5)
        inner, v = torch.randn(4, 3)[1:], b[2:, 1:]
        with self._inside_view_step(lambda: mode.from_tensor(inner)):
            with recorder:
                fake = mode.from_tensor(v)
        self.assertTrue(fake._is_view())
        self.assertIs(fake._base, mode.from_tensor(b))
        self.assertEqual(_fields_of(fake), _fields_of(v))
        self.assertEqual([f for f in recorder.log if f is not torch.ops.prim.device.default], [])

    @parametrize("user_mode", [True, False])
    def test_window_keeps_the_callers_mode_stack_and_real_ops_real(self, user_mode):
        mode, recorder = FakeTensorMode(), _OpLog()
        current = torch.utils._python_dispatch._get_current_dispatch_mode

        def during():
            return current(), torch.ones(2) + 1

        real = torch.randn(6, 5)[1:]
        with self._inside_view_step(during) as calls:
            with recorder if user_mode else contextlib.nullcontext():
                fake = mode.from_tensor(real)
                after = current()
        inside, out = calls[0]
        self.assertIs(inside, recorder if user_mode else None)
        self.assertIs(after, recorder if user_mode else None)
        self.assertIs(type(out), torch.Tensor)
        self.assertEqual(out, torch.full((2,), 2.0))
        self.assertEqual(recorder.log, [])
        self.assertTrue(fake._is_view())

    def test_weakref_callback_inside_window_converts_correctly(self):
        mode = FakeTensorMode()
        real = torch.randn(6, 5)[2:, ::2]
        results = []

        class Box:
            pass

        def drop_box():
            box = Box()
            ref = weakref.ref(box, lambda _: results.append(mode.from_tensor(real)))
            del box
            return ref

        with self._inside_view_step(drop_box):
            mode.from_tensor(torch.randn(6, 5)[1:])
        self.assertEqual(len(results), 1)
        self.assertEqual(_fields_of(results[0]), _fields_of(real))
        self.assertIs(results[0]._base, mode.from_tensor(real._base))

    def test_gc_stress_inside_conversions_gives_correct_fakes(self):
        counts = _run_script(self, _REENTRANT_STRESS, 3000)
        self.assertEqual(counts["inner"], "3000")
        self.assertEqual((counts["inner_wrong"], counts["outer_wrong"], counts["errors"]),
                         ("0", "0", "0"))


instantiate_parametrized_tests(ConversionInsideConversionTest)


class ConversionThreadTest(TestCase):
    """Several threads converting with one FakeTensorMode while fakes die."""

    @parametrize("owner", ["view", "grad"])
    def test_memo_reference_stays_valid_when_the_owner_goes(self, owner):
        # The fake of x is referred to by another fake's TensorImpl (as base of a view or as
        # .grad).  A reference the memo handed out before that owner goes must stay the fake
        # (torch stubs or frees a PyObject that C++ owned; another thread can free the owner
        # at any bytecode, with the GIL released).
        mode = FakeTensorMode()
        if owner == "view":
            x = torch.randn(4, 6)
            holder = mode.from_tensor(x[1:])
        else:
            p = torch.nn.Parameter(torch.randn(4, 6))
            p.grad = x = torch.randn(4, 6)
            holder = mode.from_tensor(p)
        memo = mode.fake_tensor_converter.tensor_memo
        gc.collect()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            taken = memo.get(x)  # what a memo hit starts with
            del holder
            self.assertEqual(taken.shape, x.shape)
            self.assertEqual(taken.fake_device, x.device)
            self.assertIs(mode.from_tensor(x), taken)
        self.assertEqual([str(w.message) for w in caught], [])

    @parametrize("n_threads", [4, 8])
    @parametrize("fakes", ["drop", "keep"])
    def test_threads_sharing_a_mode_get_correct_fakes(self, n_threads, fakes):
        counts = _run_script(self, _THREAD_STRESS, n_threads, 3, fakes)
        self.assertEqual(counts["conversions"], str(n_threads * 300 * 3))
        self.assertEqual((counts["errors"], counts["wrong"], counts["duplicates"]),
                         ("0", "0", "0"))

    def test_make_fx_fake_traces_from_several_threads(self):
        counts = _run_script(self, _MAKE_FX_STRESS, 4, 10)
        self.assertEqual(counts, {"traces": "40", "errors": "0", "wrong": "0"})

    def test_thread_switch_in_first_view_op_dispatch_keeps_conversions_correct(self):
        # the converter resolves the Python objects of its view ops at import, so the first
        # dispatch of as_strided to Python runs no Python code another thread could enter
        counts = _run_script(self, _SWITCH_IN_FIRST_DISPATCH)
        self.assertEqual(counts, {"errors": "0", "wrong": "0", "switched": "0"})

    def test_threads_making_the_first_conversions_of_each_kind_of_view(self):
        counts = _run_script(self, _FIRST_VIEW_CONVERSIONS_STRESS, 16)
        self.assertEqual(counts, {"errors": "0", "wrong": "0"})


instantiate_parametrized_tests(ConversionThreadTest)


class _DeviceReadLog:
    """Records the device reads (prim.device) dispatched to FakeTensor outside
    its kernels: the op log of reads the mode makes on its own behalf."""

    def __init__(self):
        self.reads = []

    def __enter__(self):
        dispatch = FakeTensor.__dict__["__torch_dispatch__"].__func__

        def logging(cls, func, types, args=(), kwargs=None):
            if func is torch.ops.prim.device.default and not args[0].fake_mode.in_kernel_invocation:
                self.reads.append(args[0])
            return dispatch(cls, func, types, args, kwargs)

        self._patch = unittest.mock.patch.object(FakeTensor, "__torch_dispatch__", classmethod(logging))
        self._patch.__enter__()
        return self

    def __exit__(self, *exc):
        self._patch.__exit__(*exc)


class FakeDispatchArgumentsTest(TestCase):
    def test_output_device_is_found_without_dispatching_device_reads(self):
        with FakeTensorMode():
            x, y = torch.empty(3, 4), torch.empty(())
            with _DeviceReadLog() as log:
                out = torch.ops.aten.mul.Tensor(x, y)
                cat = torch.ops.aten.cat.default([x, x], 1)
        self.assertEqual(log.reads, [])
        self.assertEqual(out.fake_device, torch.device("cpu"))
        self.assertEqual(cat.fake_device, torch.device("cpu"))

    @parametrize("device", ["cpu", "meta"])
    def test_output_device_follows_the_non_zero_dim_input(self, device):
        with FakeTensorMode(allow_meta=True) as mode:
            x = mode.from_tensor(torch.empty(3, 4, device=device))
            scalar = mode.from_tensor(torch.empty(()))
            self.assertEqual(torch.ops.aten.mul.Tensor(scalar, x).fake_device, torch.device(device))
            self.assertEqual(torch.ops.aten.mul.Tensor(x, scalar).fake_device, torch.device(device))
            self.assertEqual(torch.ops.aten.cat.default([x, x]).fake_device, torch.device(device))


instantiate_parametrized_tests(FakeDispatchArgumentsTest)


def _constructor_overloads():
    from torch._subclasses.fake_tensor import _is_tensor_constructor, _like_tensor_constructors

    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        packet = getattr(torch.ops.aten, name, None) if namespace == "aten" else None
        op = getattr(packet, schema.overload_name or "default", None)
        if op is not None and (_is_tensor_constructor(op) or op in _like_tensor_constructors):
            yield op


_LIKE_CONSTRUCTORS = {
    "zeros_like": lambda x, **kw: torch.zeros_like(x, **kw),
    "full_like": lambda x, **kw: torch.full_like(x, 2.0, **kw),
    "randint_like": lambda x, **kw: torch.randint_like(x, 3, 7, **kw),
    "new_zeros": lambda x, **kw: x.new_zeros((4,), **kw),
    "new_empty_strided": lambda x, **kw: x.new_empty_strided((2, 2), (1, 2), **kw),
}


class FakeTensorConstructorDeviceTest(TestCase):
    def test_every_constructor_takes_device_as_keyword_only(self):
        overloads = list(_constructor_overloads())
        self.assertGreater(len(overloads), 50)
        for op in overloads:
            device_arguments = [a for a in op._schema.arguments if a.name == "device"]
            self.assertTrue(all(a.kwarg_only for a in device_arguments), op)

    @parametrize("name", list(_LIKE_CONSTRUCTORS))
    def test_like_constructor_takes_the_input_device(self, name):
        with FakeTensorMode(allow_meta=True) as mode:
            x = mode.from_tensor(torch.empty(2, 3, device="meta"))
            self.assertEqual(_LIKE_CONSTRUCTORS[name](x).fake_device, torch.device("meta"))

    @parametrize("name", list(_LIKE_CONSTRUCTORS))
    def test_like_constructor_takes_an_explicit_device(self, name):
        with FakeTensorMode(allow_meta=True) as mode:
            x = mode.from_tensor(torch.empty(2, 3, device="meta"))
            out = _LIKE_CONSTRUCTORS[name](x, device="cpu", dtype=torch.float64)
        self.assertEqual((out.fake_device, out.dtype), (torch.device("cpu"), torch.float64))

    def test_factory_defaults_to_cpu_and_takes_an_explicit_device(self):
        with FakeTensorMode(allow_meta=True):
            self.assertEqual(torch.zeros(2, 3).fake_device, torch.device("cpu"))
            self.assertEqual(torch.randint(1, 5, (2,), device="meta").fake_device, torch.device("meta"))


instantiate_parametrized_tests(FakeTensorConstructorDeviceTest)


if __name__ == "__main__":
    run_tests()
