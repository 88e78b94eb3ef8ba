"""Any batch size without capturing again: a compiled module met at a second size of a dim makes
it dynamic from its first capture (specialize.py rewrites the capture, its lowering binds the
attributes that follow the dim, tracecache keeps a shape-polymorphic entry); later sizes replay
that entry without calling Python. resnet18 and a BERT-style encoder at batch 1..16 capture once
and equal eager PyTorch; a rewrite that would be wrong is caught by the check against eager at
its first size; mark_dynamic, mark_static and dynamic=False do what they say; a second process
serves new sizes from the stored entry.

Run by ctest as python.test_torch_dynamic (tests/python/run_test.sh)."""

import unittest

import torch
from torch import nn

import torch_models
import tracecache
import tracecache.torch



def check_sizes(test, model, make_inputs, sizes, tolerance=1e-4):
    """Calls the compiled model at every batch size; returns the capture count it took."""
    compiled = tracecache.torch.compile(model)
    before = tracecache.torch.stats()["captures"]
    for b in sizes:
        inputs = make_inputs(b)
        want = torch_models.eager(model, *inputs)
        got = compiled(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        for k, (g, w) in enumerate(zip(got, want)):
            test.assertEqual(tuple(g.shape), tuple(w.shape), f"batch {b} output {k}")
            test.assertLessEqual(torch_models.relative_error(g, w), tolerance, f"batch {b} output {k}")
    return compiled, tracecache.torch.stats()["captures"] - before


class Dynamic(unittest.TestCase):
    def setUp(self):
        tracecache.configure(no_cache=True)

    def test_resnet18_at_batch_1_to_16_captures_once(self):
        model = torch_models.zoo_model("resnet18")
        g = torch.Generator().manual_seed(3)
        compiled, captures = check_sizes(self, model, lambda b: (torch.randn(b, 3, 32, 32, generator=g),),
                                         range(1, 17))
        self.assertEqual(captures, 1)
        stats = compiled.stats()
        self.assertEqual(stats["traces"], 2, "batch 1 and the dynamic entry made at batch 2")
        self.assertEqual(stats["entries"], 2)
        self.assertGreaterEqual(stats["specializations"], 14, "batch 3..16 from the template, no trace")
        self.assertFalse(stats["fell_back_to_lazy"])

    def test_bert_at_batch_1_to_16_captures_once(self):
        model = torch_models.bert()
        compiled, captures = check_sizes(self, model, lambda b: torch_models.bert_inputs(batch=b, seed=b),
                                         range(1, 17))
        self.assertEqual(captures, 1)
        self.assertEqual(compiled.stats()["traces"], 2)

    def test_a_wrong_rewrite_is_caught_by_the_check_against_eager(self):
        class Literal(nn.Module):
            def forward(self, x):
                # view(1, -1): at batch 1 the 1 looks like the batch size, but it is a literal.
                return x.view(1, -1).sum(1) + x.sum()
        g = torch.Generator().manual_seed(1)
        compiled, captures = check_sizes(self, Literal(), lambda b: (torch.randn(b, 4, generator=g),), [1, 3, 3, 5])
        self.assertLessEqual(captures, 3, "batch 1, and a real capture where the rewrite was wrong")

    def test_mark_dynamic_makes_the_first_trace_serve_every_size(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Flatten(0)).eval()
        compiled = tracecache.torch.compile(model)
        for b in (2, 3, 7):
            x = torch.randn(b, 6)
            tracecache.torch.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), model(x).detach())
        self.assertEqual(compiled.stats()["traces"], 1)

    def test_mark_static_and_dynamic_false(self):
        # dynamic=False: every new size captures again. mark_static: every new size traces again
        # (its own static entry), rewritten from the first capture.
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU()).eval()
        compiled = tracecache.torch.compile(model, dynamic=False)
        before = tracecache.torch.stats()["captures"]
        for b in (2, 3, 4):
            x = torch.randn(b, 6)
            torch.testing.assert_close(compiled(x), model(x).detach())
        self.assertEqual(tracecache.torch.stats()["captures"] - before, 3)
        compiled = tracecache.torch.compile(model)
        for b in (2, 3, 4):
            x = torch.randn(b, 6)
            tracecache.torch.mark_static(x, 0)
            torch.testing.assert_close(compiled(x), model(x).detach())
        stats = compiled.stats()
        self.assertEqual((stats["traces"], stats["entries"], stats["specializations"]), (3, 3, 0))


PROCESS = r'''
import json, sys
import torch
sys.path.insert(0, sys.argv[2])
import torch_models
import tracecache, tracecache.torch
tracecache.configure(db=sys.argv[1])
model = torch_models.zoo_model("resnet18")
compiled = tracecache.torch.compile(model)
sizes = [int(s) for s in sys.argv[3].split(",")]
errors = []
for b in sizes:
    x = torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(b))
    errors.append(torch_models.relative_error(compiled(x), torch_models.eager(model, x)[0]))
print(json.dumps({"torch": tracecache.torch.stats(), "counters": tracecache.counters(), "errors": errors}))
'''


class SecondProcess(unittest.TestCase):
    def test_new_sizes_in_a_warm_process_need_no_capture(self):
        runs, directory = torch_models.run_processes(self, PROCESS, [["1,2"], ["5,9"]])
        first, second = runs
        self.assertEqual(first["torch"]["captures"], 1)
        self.assertEqual(second["torch"], {"captures": 0, "lowerings": 0})
        self.assertEqual(second["counters"]["traces"], 0)
        self.assertEqual(second["counters"]["shape_specializations"], 2)
        self.assertLessEqual(max(first["errors"] + second["errors"]), 1e-4)


if __name__ == "__main__":
    unittest.main()
