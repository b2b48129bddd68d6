# Owner(s): ["module: meta tensors"]

import copy
import gc
import sys
import threading
import weakref

import torch
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
)
from torch.utils.weak import WeakIdKeyDictionary, _WeakIdKeyWeakValueDictionary


_KINDS = [WeakIdKeyDictionary, _WeakIdKeyWeakValueDictionary]


class _Value:
    pass


class _ReadThenWait(dict):
    """A dict whose setdefault() returns to each thread's first call only
    once n threads have read what it holds."""

    def __init__(self, data, n):
        super().__init__(data)
        self.barrier = threading.Barrier(n)
        self.waited = set()

    def setdefault(self, key, default=None):
        stored = super().setdefault(key, default)
        if threading.get_ident() not in self.waited:
            self.waited.add(threading.get_ident())
            self.barrier.wait(timeout=60)
        return stored


class WeakIdKeyDictionaryTest(TestCase):
    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__.lstrip("_"))
    def test_set_replaces_live_entry_and_key_death_drops_it(self, kind):
        memo = kind()
        x, a, b = torch.randn(2), torch.randn(1), torch.randn(1)
        memo[x] = a
        self.assertEqual(weakref.getweakrefcount(x), 1)
        memo[x] = b
        memo[x] = a
        self.assertIs(memo.get(x), a)
        self.assertEqual(len(memo), 1)
        # the entry keeps its first key reference; a weak value's reference
        # carries the key reference it was stored with
        self.assertEqual(weakref.getweakrefcount(x), 1 if kind is WeakIdKeyDictionary else 2)
        del x
        self.assertEqual(len(memo), 0)
        self.assertEqual(memo.deaths, 1)

    def test_weak_value_death_drops_entry(self):
        memo = _WeakIdKeyWeakValueDictionary()
        x, v = torch.randn(2), torch.randn(1)
        self.assertIs(memo.setdefault(x, v), v)
        del v
        self.assertEqual(len(memo), 0)
        self.assertIsNone(memo.get(x))
        self.assertEqual(memo.deaths, 0)

    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__.lstrip("_"))
    def test_pop_contains_and_update(self, kind):
        memo = kind()
        x, y, v = torch.randn(2), torch.randn(2), torch.randn(1)
        memo.update({x: v})
        self.assertIn(x, memo)
        self.assertNotIn(y, memo)
        self.assertNotIn(1, memo)  # not weakly referenceable
        self.assertIs(memo.pop(x), v)
        self.assertIsNone(memo.pop(x, None))
        with self.assertRaises(KeyError):
            del memo[x]
        self.assertEqual(len(memo), 0)

    def test_items_skip_a_value_that_dies_while_iterating(self):
        memo = _WeakIdKeyWeakValueDictionary()
        x, y, w, v = torch.randn(2), torch.randn(2), _Value(), _Value()
        v.cycle = v  # dies only by the cyclic gc
        memo[y] = w
        memo[x] = v
        del v
        items = memo.items()
        key, value = next(items)
        self.assertIs(key, y)
        self.assertIs(value, w)
        gc.collect()
        self.assertEqual(list(items), [])

    def test_threads_storing_over_a_dead_value_agree_and_keep_theirs(self):
        # Two threads read the entry of a value that died, before its death
        # callback ran, and then store their own: they must agree on one
        # value, and the late callback must not remove it.
        memo = _WeakIdKeyWeakValueDictionary()
        x, old = torch.randn(2), _Value()
        memo.setdefault(x, old)
        memo.data = _ReadThenWait(memo.data, 2)
        got, seen = [], []

        def store():
            got.append(memo.setdefault(x, _Value()))

        def race(ref):
            # CPython calls a newer weakref's callback first, once every
            # weakref to old is dead: the memo still holds old's entry (seen
            # checks it)
            seen.append((len(memo), memo.get(x)))
            threads = [threading.Thread(target=store) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        watch = weakref.ref(old, race)  # noqa: F841
        del old
        self.assertEqual(seen, [(1, None)])
        self.assertEqual(len(got), 2)
        self.assertIs(got[0], got[1])
        self.assertIs(memo.get(x), got[0])

    @parametrize("n_threads", [4, 8])
    def test_threads_get_back_the_live_value_they_were_given(self, n_threads):
        # Each value dies when the last thread drops it, so death callbacks run
        # in every thread while others store new values under the same keys.
        memo = _WeakIdKeyWeakValueDictionary()
        keys = [torch.randn(1) for _ in range(4)]
        lost, finished = [], []

        def work(k):
            for i in range(20000):
                key = keys[(i * 7 + k) % len(keys)]
                value = memo.setdefault(key, _Value())
                if memo.get(key) is not value:
                    lost.append(i)
            finished.append(k)

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        self.assertEqual(len(finished), n_threads)
        self.assertEqual(lost, [])

    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__.lstrip("_"))
    @parametrize("copy_fn", [copy.copy, copy.deepcopy], name_fn=lambda f: f.__name__)
    def test_copies_keep_the_keys(self, copy_fn, kind):
        memo = kind()
        x, v = torch.randn(2), torch.randn(1)
        memo[x] = v
        memo_copy = copy_fn(memo)
        self.assertIs(type(memo_copy), type(memo))
        self.assertEqual([id(key) for key in memo_copy], [id(x)])
        del x
        self.assertEqual((len(memo), len(memo_copy)), (0, 0))

    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__.lstrip("_"))
    def test_copy_shares_the_values(self, kind):
        memo = kind()
        x, v = torch.randn(2), torch.randn(1)
        memo[x] = v
        self.assertIs(copy.copy(memo).get(x), v)

    def test_deepcopy_copies_strong_values(self):
        memo = WeakIdKeyDictionary()
        x, v = torch.randn(2), torch.randn(1)
        memo[x] = v
        value = copy.deepcopy(memo).get(x)
        self.assertIsNot(value, v)
        self.assertEqual(value, v)

    def test_deepcopy_shares_weak_values(self):
        memo = _WeakIdKeyWeakValueDictionary()
        x, v = torch.randn(2), torch.randn(1)
        memo[x] = v
        self.assertIs(copy.deepcopy(memo).get(x), v)


instantiate_parametrized_tests(WeakIdKeyDictionaryTest)


if __name__ == "__main__":
    run_tests()
