# Owner(s): ["module: meta tensors"]

import copy
import weakref

import torch
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
)
from torch.utils.weak import WeakIdKeyDictionary, WeakIdKeyWeakValueDictionary


_KINDS = [WeakIdKeyDictionary, WeakIdKeyWeakValueDictionary]


class WeakIdKeyDictionaryTest(TestCase):
    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__)
    def test_set_replaces_live_entry_and_key_death_drops_it(self, kind):
        memo = kind()
        x, a, b = torch.randn(2), torch.randn(1), torch.randn(1)
        memo[x] = a
        memo[x] = b
        self.assertIs(memo.get(x), b)
        self.assertEqual(len(memo), 1)
        self.assertEqual(weakref.getweakrefcount(x), 1)
        del x
        self.assertEqual(len(memo), 0)
        self.assertEqual(memo.deaths, 1)

    def test_weak_value_death_drops_entry(self):
        memo = WeakIdKeyWeakValueDictionary()
        x, v = torch.randn(2), torch.randn(1)
        self.assertIs(memo.setdefault(x, v), v)
        del v
        self.assertEqual(len(memo), 0)
        self.assertIsNone(memo.get(x))
        self.assertEqual(memo.deaths, 1)

    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__)
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

    @parametrize("kind", _KINDS, name_fn=lambda kind: kind.__name__)
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
        memo = WeakIdKeyWeakValueDictionary()
        x, v = torch.randn(2), torch.randn(1)
        memo[x] = v
        self.assertIs(copy.deepcopy(memo).get(x), v)


instantiate_parametrized_tests(WeakIdKeyDictionaryTest)


if __name__ == "__main__":
    run_tests()
