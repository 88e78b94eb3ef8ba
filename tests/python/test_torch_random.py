"""Random ops in compiled PyTorch code: dropout, bernoulli (stochastic depth), rand, randn, randint
on tracecache's own seeded generator. The seed is a graph input, so every call draws new numbers
with one trace; tracecache.manual_seed(n) makes them reproducible, also in another process; the
numbers have the right distributions (not PyTorch's generator's values); dropout 0 equals eager
exactly; mobilenet_v2 and a small VisionTransformer (vit_b_16's code, dropout 0.1) train with
dropout on, their losses falling as eager PyTorch's do.

Run by ctest as python.test_torch_random (tests/python/run_test.sh)."""

import copy
import unittest

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

import torch_models
import tracecache
import tracecache.torch



class Dropped(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x)


def step_of(model, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


class Random(unittest.TestCase):
    def setUp(self):
        tracecache.configure(no_cache=True)

    def test_dropout_draws_new_numbers_every_call_with_one_trace(self):
        compiled = tracecache.torch.compile(Dropped(0.5).train())
        x = torch.ones(64, 64)
        tracecache.manual_seed(1)
        a, b = compiled(x), compiled(x)
        for y in (a, b):
            self.assertTrue(torch.all((y == 0) | (y == 2)), "kept elements are scaled by 1 / (1 - p)")
            self.assertLess(abs((y == 0).float().mean().item() - 0.5), 0.05)
        self.assertFalse(torch.equal(a, b), "a new offset per call")
        self.assertEqual(compiled.stats()["traces"], 1)
        tracecache.manual_seed(1)
        self.assertTrue(torch.equal(compiled(x), a), "reproducible from manual_seed")
        self.assertTrue(torch.equal(compiled(x), b))

    def test_dropout_zero_and_eval_equal_eager_exactly(self):
        x = torch.randn(4, 8)
        for model in (Dropped(0.0).train(), Dropped(0.5).eval()):
            self.assertTrue(torch.equal(tracecache.torch.compile(model)(x), model(x)))

    def test_rand_randn_randint_bernoulli(self):
        def fn(x):
            keep = torch.empty(x.shape[0], 1).bernoulli_(0.8)  # stochastic depth's mask
            return (torch.rand(1000, 100), torch.randn(1000, 100), torch.randint(3, 9, (1000, 100)),
                    torch.rand_like(x), x * keep)
        compiled = tracecache.torch.compile(fn)
        u, n, k, like, kept = compiled(torch.ones(2000, 3))
        self.assertEqual((u.shape, u.dtype), ((1000, 100), torch.float32))
        self.assertTrue(0 <= u.min().item() and u.max().item() < 1)
        self.assertLess(abs(u.mean().item() - 0.5), 0.01)
        self.assertLess(abs(n.mean().item()), 0.02)
        self.assertLess(abs(n.std().item() - 1), 0.02)
        self.assertEqual(k.dtype, torch.int64)
        self.assertEqual((k.min().item(), k.max().item()), (3, 8))
        self.assertEqual(like.shape, (2000, 3))
        rows = kept[:, 0]
        self.assertTrue(torch.all((rows == 0) | (rows == 1)))
        self.assertLess(abs(rows.mean().item() - 0.8), 0.05)
        self.assertFalse(torch.equal(u, n))

    def test_training_with_dropout_on(self):
        torch.manual_seed(0)
        # vit_b_16's own code (VisionTransformer) at a small width and depth; the full vit_b_16 and
        # mobilenet_v2 train with dropout in the coverage sweep (bench/torch_models.py).
        vit = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, dropout=0.1,
            attention_dropout=0.1, num_classes=10)
        models = [("mobilenet_v2", torchvision.models.mobilenet_v2(num_classes=10), (8, 3, 32, 32)),
                  ("vit (vit_b_16's code, small)", vit, (8, 3, 32, 32))]
        for name, model, shape in models:
            with self.subTest(model=name):
                reference = copy.deepcopy(model)
                opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
                ref_opt = torch.optim.SGD(reference.parameters(), lr=0.02, momentum=0.9)
                train = tracecache.torch.compile_step(step_of(model, opt), model, opt)
                eager = step_of(reference, ref_opt)
                g = torch.Generator().manual_seed(2)
                x, y = torch.randn(*shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g)
                tracecache.manual_seed(0)
                ours = [train(x, y).item() for _ in range(8)]
                theirs = [eager(x, y).item() for _ in range(8)]
                self.assertEqual(train.stats()["traces"], 1)
                self.assertEqual(train.graph_breaks(), [])
                self.assertLess(min(theirs[-3:]), theirs[0], f"eager's loss falls: {theirs}")
                self.assertLess(min(ours[-3:]), ours[0] * 0.9, f"{name}: the loss falls as eager's does: {ours}")


PROCESS = r'''
import json, sys
import torch
import tracecache, tracecache.torch
tracecache.configure(db=sys.argv[1])
compiled = tracecache.torch.compile(torch.nn.Dropout(0.3).train())
tracecache.manual_seed(42)
out = [compiled(torch.ones(6, 5)).tolist() for _ in range(2)]
print(json.dumps({"out": out, "torch": tracecache.torch.stats()}))
'''


class Reproducible(unittest.TestCase):
    def test_the_same_seed_in_another_process_gives_the_same_numbers(self):
        runs, directory = torch_models.run_processes(self, PROCESS, [[], []])
        self.assertEqual(runs[0]["out"], runs[1]["out"])
        self.assertNotEqual(runs[0]["out"][0], runs[0]["out"][1])
        self.assertEqual(runs[1]["torch"]["captures"], 0)


if __name__ == "__main__":
    unittest.main()
