"""tracecache.torch.compile on every torchvision model of the zoo (at a small resolution) and a
BERT-style encoder built from torch.nn layers: outputs of lazy capture (mode="lazy") and of trace
once (the default) equal PyTorch's eager outputs within 1e-4 of the largest output.

Run by ctest as python.test_torch_zoo (tests/python/run_test.sh)."""

import unittest

import torch

import torch_models
import tracecache
import tracecache.torch


class Zoo(unittest.TestCase):
    def check(self, name, model, inputs):
        want = torch_models.eager(model, *inputs)
        tracecache.configure(no_cache=True)
        for mode in ("lazy", "once"):
            compiled = tracecache.torch.compile(model, mode=mode)
            got = compiled(*inputs)
            got = got if isinstance(got, tuple) else (got,)
            self.assertEqual(len(got), len(want), (name, mode))
            for k, (g, w) in enumerate(zip(got, want)):
                self.assertIsInstance(g, torch.Tensor)
                self.assertLessEqual(torch_models.relative_error(g, w), 1e-4, f"{name} {mode} output {k}")

    def test_torchvision_models(self):
        for name, resolution in torch_models.ZOO.items():
            with self.subTest(model=name):
                x = torch.randn(1, 3, resolution, resolution, generator=torch.Generator().manual_seed(7))
                self.check(name, torch_models.zoo_model(name), (x,))

    def test_bert_style_encoder(self):
        self.check("bert", torch_models.bert(), torch_models.bert_inputs())


if __name__ == "__main__":
    unittest.main()
