"""tracecache.torch.compile_step: a whole training step (forward, loss.backward(),
clip_grad_norm_, optimizer step) captured as one graph; over 10 steps its losses, the model's
weights and buffers and the optimizer's state are as close to eager PyTorch in float64 as eager
PyTorch's own float32 run is (times 4), in lazy capture and trace once, with one capture.

Run by ctest as python.test_torch_train (tests/python/run_test.sh)."""

import copy
import unittest

import torch
import torch.nn.functional as F
from torch import nn

import torch_models
import tracecache
import tracecache.torch


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def convnet():
    # No bias before the batch norm: its gradient is zero up to rounding, and Adam would turn
    # that rounding noise into full-size steps in either implementation.
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def step_of(model, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss
    return step


def assert_as_close_as_float32(test, got, eager32, eager64, what, factor=4.0, floor=1e-4):
    """The arbiter is eager float64: tracecache's float32 result is no further from it than eager
    PyTorch's float32 result, times `factor`, plus `floor` (relative to float64's magnitude: eager
    float32 sums in float64's order, so it can land within a few ulps where another order, as
    tracecache's, lands 1e-5 away on a cancelling sum that Adam then normalizes). So float32
    rounding is not taken for an error, and a real error, far above it, cannot hide."""
    ours = torch_models.relative_error(got, eager64)
    theirs = torch_models.relative_error(eager32, eager64)
    test.assertLessEqual(ours, factor * theirs + floor, f"{what}: tracecache {ours:.3g} from float64, eager float32 "
                                                        f"{theirs:.3g}")


class Training(unittest.TestCase):
    def check(self, make_model, make_optimizer, input_shape):
        g = torch.Generator().manual_seed(11)
        batches = [(torch.randn(4, *input_shape, generator=g), torch.randint(0, 3, (4,), generator=g))
                   for _ in range(10)]
        tracecache.configure(no_cache=True)
        for mode in ("lazy", "once"):
            torch.manual_seed(0)
            model = make_model()
            reference, arbiter = copy.deepcopy(model), copy.deepcopy(model).double()
            optimizer, ref_optimizer, arb_optimizer = make_optimizer(model), make_optimizer(reference), \
                make_optimizer(arbiter)
            compiled = tracecache.torch.compile_step(step_of(model, optimizer), model, optimizer, mode=mode)
            eager, eager64 = step_of(reference, ref_optimizer), step_of(arbiter, arb_optimizer)
            captures = tracecache.torch.stats()["captures"]
            for i, (x, y) in enumerate(batches):
                loss = compiled(x, y)
                want, want64 = eager(x, y).detach(), eager64(x.double(), y).detach()
                assert_as_close_as_float32(self, loss, want, want64, f"{mode} step {i} loss")
                states = zip(model.state_dict().items(), reference.state_dict().values(), arbiter.state_dict().values())
                for (name, got), ref, ref64 in states:
                    if got.is_floating_point():
                        assert_as_close_as_float32(self, got, ref, ref64, f"{mode} step {i} {name}")
                    else:
                        self.assertTrue(torch.equal(got, ref), f"{mode} step {i} {name}")
            for p, q, r in zip(model.parameters(), reference.parameters(), arbiter.parameters()):
                for slot, value in ref_optimizer.state[q].items():
                    assert_as_close_as_float32(self, optimizer.state[p][slot], value, arb_optimizer.state[r][slot], slot)
            self.assertEqual(tracecache.torch.stats()["captures"] - captures, 1, mode)

    def test_mlp_sgd_momentum(self):
        self.check(mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3), (8,))

    def test_convnet_adam(self):
        self.check(convnet, lambda m: torch.optim.Adam(m.parameters(), lr=0.01), (3, 8, 8))

    def test_convnet_sgd_batch_norm_statistics(self):
        self.check(convnet, lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), (3, 8, 8))

    def test_resnet18_training_step(self):
        # One step at 64x64 with a batch of 4. Deep batch-normed nets at tiny batches are
        # ill-conditioned: at 32x32 with 2 images the last stage's batch norms see two values per
        # channel, and after a few momentum steps float32 rounding decides the small-gradient
        # parameters in any implementation (PyTorch's own float32 and float64 runs part ways too).
        tracecache.configure(mode="once", no_cache=True)
        model = torch_models.zoo_model("resnet18").train()
        reference = copy.deepcopy(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
        compiled = tracecache.torch.compile_step(step_of(model, optimizer), model, optimizer)
        g = torch.Generator().manual_seed(2)
        x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 1000, (4,), generator=g)
        want = step_of(reference, ref_optimizer)(x, y).detach()
        self.assertLessEqual(torch_models.relative_error(compiled(x, y), want), 1e-4)
        for (name, got), ref in zip(model.state_dict().items(), reference.state_dict().values()):
            if got.is_floating_point():
                self.assertLessEqual(torch_models.relative_error(got, ref), 1e-4, name)

    def test_autograd_grad_and_a_hand_written_update(self):
        tracecache.configure(mode="once", no_cache=True)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        reference = copy.deepcopy(model)

        def step_of_grad(m):
            def step(x, y):
                loss = F.cross_entropy(m(x), y)
                grads = torch.autograd.grad(loss, list(m.parameters()))
                with torch.no_grad():
                    for p, g in zip(m.parameters(), grads):
                        p.sub_(0.1 * g)
                return loss
            return step
        compiled, eager = tracecache.torch.compile_step(step_of_grad(model), model), step_of_grad(reference)
        g = torch.Generator().manual_seed(4)
        for _ in range(10):
            x, y = torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
            self.assertLessEqual(torch_models.relative_error(compiled(x, y), eager(x, y).detach()), 1e-4)
        for p, q in zip(model.parameters(), reference.parameters()):
            self.assertLessEqual(torch_models.relative_error(p, q), 1e-4)

    def test_training_mode_forward_updates_the_running_statistics(self):
        tracecache.configure(mode="once", no_cache=True)
        torch.manual_seed(0)
        model = convnet().train()
        reference = copy.deepcopy(model)
        before = model[1].running_mean.clone()
        x = torch.randn(4, 3, 8, 8)
        # compile() runs a module as a pure function: a forward that writes its buffers is refused,
        # and the failed capture leaves them as they were.
        with self.assertRaises(tracecache.torch.CaptureError) as caught:
            tracecache.torch.compile(model)(x)
        self.assertIn("compile_step(model, model)", str(caught.exception))
        self.assertTrue(torch.equal(model[1].running_mean, before))
        forward = tracecache.torch.compile_step(model, model)
        for _ in range(3):
            x = torch.randn(4, 3, 8, 8)
            self.assertLessEqual(torch_models.relative_error(forward(x), reference(x).detach()), 1e-4)
        for name in ("running_mean", "running_var"):
            self.assertLessEqual(torch_models.relative_error(getattr(model[1], name), getattr(reference[1], name)), 1e-4)
        self.assertEqual(int(model[1].num_batches_tracked), 3)

    def test_a_value_read_in_the_step_takes_its_branch(self):
        # A branch on the loss's sign: each branch is its own path (a value guard on the boolean
        # read), and every call equals eager PyTorch's step, whichever branch it takes. (A branch
        # on `loss.item() > 0` guards the loss's value itself, as read: a new trace per value.)
        tracecache.configure(mode="once", no_cache=True)
        torch.manual_seed(0)
        model = mlp()
        reference = copy.deepcopy(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)

        def step_of_branching(m, opt):
            def step(x):
                opt.zero_grad()
                loss = m(x).sum()
                if loss > 0:
                    loss.backward()
                else:
                    (-loss).backward()
                opt.step()
                return loss
            return step
        compiled = tracecache.torch.compile_step(step_of_branching(model, optimizer), model, optimizer)
        eager = step_of_branching(reference, ref_optimizer)
        g = torch.Generator().manual_seed(3)
        signs = set()
        for i in range(6):
            x = torch.randn(2, 8, generator=g) * (1 if i % 3 else -1) * 10
            want = eager(x).detach()
            signs.add(bool(want > 0))
            self.assertLessEqual(torch_models.relative_error(compiled(x), want), 1e-4, f"step {i}")
            for got, ref in zip(model.parameters(), reference.parameters()):
                self.assertLessEqual(torch_models.relative_error(got, ref), 1e-4, f"step {i}")
        self.assertEqual(signs, {True, False}, "both branches were taken")
        self.assertEqual(compiled.stats()["entries"], 2)
        self.assertEqual([b[0] for b in compiled.graph_breaks()], ["value read"])


class RecordingEmitter:
    """An emitter that records registry op names instead of running them."""

    def __init__(self):
        self.ops = set()

    def op(self, name, inputs, attrs):
        self.ops.add(name)
        return object()

    def constant(self, target, tensor):
        return object()


class ZooTrainingSteps(unittest.TestCase):
    def test_every_zoo_training_step_lowers(self):
        """Forward, backward and an SGD step of every zoo model (dropout at p = 0: PyTorch's
        random numbers cannot be reproduced) capture and lower with no unmapped op."""
        from tracecache.torch import capture, lowering
        models = [(name, torch_models.zoo_model(name), (torch.randn(2, 3, r, r),))
                  for name, r in torch_models.ZOO.items()]
        models.append(("bert", torch_models.Bert(dropout=0.0), torch_models.bert_inputs()))
        for name, model, inputs in models:
            with self.subTest(model=name):
                model.train()
                for m in model.modules():
                    if isinstance(m, nn.Dropout):
                        m.p = 0.0
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

                def step():
                    optimizer.zero_grad()
                    out = model(*inputs)
                    loss = sum(o.float().mean() for o in (out if isinstance(out, tuple) else (out,)))
                    loss.backward()
                    optimizer.step()
                    return loss
                graph = capture.capture(step, [], [], [], [])
                emitter = RecordingEmitter()
                lowering.lower(graph.graph, emitter, [])
                self.assertIn("conv2d_weight_grad" if name != "bert" else "scatter_add", emitter.ops)


if __name__ == "__main__":
    unittest.main()
