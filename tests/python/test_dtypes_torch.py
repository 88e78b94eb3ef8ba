"""The dtypes added for mixed precision, end to end against PyTorch: a trace program per dtype
runs through the CLI on the reference backend in eager and lazy mode and on the cpu backend in
eager, lazy and once mode (which computes bf16, f16, i8, u8 and i16 widened to f32 and i32, and
declines f64: lazy mode says which op and dtype and runs the graph on the reference evaluator,
eager and once mode refuse it with the same words), and each output matches torch computing the same op on
the same inputs: f64 and the integers exactly or within an ulp of f64, bf16 and f16 exactly for
the ops PyTorch rounds once (add, mul, neg, relu, abs, sum) and within one ulp of the type for
the transcendental ones, whose f32 values PyTorch computes with its own vectorized functions."""
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

CLI = os.environ["TRACECACHE_CLI"]
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
TORCH = {"f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16, "i8": torch.int8,
         "u8": torch.uint8, "i16": torch.int16}
FLOAT_OPS = ["add", "mul", "sub", "neg", "abs", "relu", "exp", "tanh", "sigmoid", "sum"]
INT_OPS = ["add", "mul", "sub", "neg", "abs", "relu", "sum"]
EXACT = {"add", "mul", "sub", "neg", "abs", "relu", "sum"}


def torch_op(op, a, b):
    if a.dtype == torch.float16 and op in ("relu", "exp", "tanh", "sigmoid"):
        # PyTorch 1.13 has no CPU f16 kernels for these: its rule, f32 then one rounding.
        return torch_op(op, a.float(), b.float()).half()
    if op == "sum":
        return a.sum(dtype=a.dtype) if a.dtype.is_floating_point else a.sum()
    if op in ("add", "mul", "sub"):
        return getattr(torch, op)(a, b)
    return getattr(torch, op)(a)


def program(dtype, ops):
    low, high = (-3, 3) if dtype != "u8" else (0, 40)
    if dtype in ("i8", "i16"):
        low, high = -60, 60
    lines = ["tracecache 1", "steps 1",
             f"input a : {dtype}[64] = uniform(seed=1, low={low}, high={high})",
             f"input b : {dtype}[64] = uniform(seed=2, low={low}, high={high})"]
    outs = ["af", "bf"]
    wide = "f64" if dtype == "f64" else "f32" if dtype in ("bf16", "f16") else "i64"
    lines += [f"af = cast(a, dtype={wide})", f"bf = cast(b, dtype={wide})"]
    for op in ops:
        args = "a, b" if op in ("add", "mul", "sub") else "a, axes=[0]" if op == "sum" else "a"
        lines += [f"r_{op} = {op}({args})", f"o_{op} = cast(r_{op}, dtype={wide})"]
        outs.append(f"o_{op}")
    lines.append("output " + ", ".join(outs))
    return "\n".join(lines) + "\n"


class DTypesAgainstTorch(unittest.TestCase):
    def run_program(self, text, mode, out_dir, backend="reference", code=0):
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write(text)
        r = subprocess.run([CLI, "run", f.name, "--no-cache", "--mode", mode, "--backend", backend,
                            "--save-outputs", out_dir], capture_output=True, text=True, env=CLI_ENV)
        os.unlink(f.name)
        self.assertEqual(r.returncode, code, r.stderr)
        return r.stderr

    def test_each_dtype_and_op_matches_torch(self):
        for dtype, tdtype in TORCH.items():
            ops = FLOAT_OPS if tdtype.is_floating_point else INT_OPS
            runs = [("eager", "reference"), ("lazy", "reference"), ("lazy", "cpu")]
            if dtype == "f64":
                for mode in ("eager", "once"):  # the cpu backend refuses f64 there, naming op and dtype
                    with tempfile.TemporaryDirectory() as out:
                        err = self.run_program(program(dtype, ops), mode, out, backend="cpu", code=2)
                        self.assertRegex(err, rf"backend 'cpu' does not support op '\w+' on {dtype}")
            else:  # the cpu backend computes the storage types widened, in every mode
                runs += [("eager", "cpu"), ("once", "cpu")]
            for mode, backend in runs:
                with self.subTest(dtype=dtype, mode=mode, backend=backend), tempfile.TemporaryDirectory() as out:
                    err = self.run_program(program(dtype, ops), mode, out, backend=backend)
                    declined = rf"backend 'cpu' does not support op '\w+' on {dtype}\); this step ran on the " \
                               "reference evaluator"
                    if backend == "cpu" and dtype == "f64":
                        self.assertRegex(err, declined)
                    else:
                        self.assertNotRegex(err, "does not support")
                    load = lambda name: np.load(os.path.join(out, f"step0_{name}.npy"))
                    a = torch.from_numpy(load("af")).to(tdtype)
                    b = torch.from_numpy(load("bf")).to(tdtype)
                    for op in ops:
                        got = load(f"o_{op}")
                        want = torch_op(op, a, b)
                        want = want.to(torch.float64 if tdtype.is_floating_point else torch.int64).numpy()
                        if not tdtype.is_floating_point or op in EXACT and dtype != "f64":
                            np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {op} {mode}")
                        elif dtype == "f64":
                            np.testing.assert_allclose(got, want, rtol=4e-16 if op in EXACT else 2e-15,
                                                       atol=1e-300, err_msg=f"{dtype} {op} {mode}")
                        else:
                            ulp = 2.0 ** -7 if dtype == "bf16" else 2.0 ** -10
                            np.testing.assert_allclose(got, want, rtol=ulp, atol=1e-6,
                                                       err_msg=f"{dtype} {op} {mode}")

    def test_cast_rounds_to_nearest_even_as_torch(self):
        xs = np.concatenate([np.linspace(-70000, 70000, 301), np.linspace(-1, 1, 301),
                             [1 + 2 ** -8, 1 + 3 * 2 ** -8, 65520.0, 65519.0, 2.0 ** -25, 3 * 2.0 ** -26]])
        with tempfile.TemporaryDirectory() as d:
            np.save(os.path.join(d, "x.npy"), xs.astype(np.float32))
            text = (f"tracecache 1\nsteps 1\ninput x : f32[{len(xs)}] = npy(\"{d}/x.npy\")\n"
                    "h = cast(x, dtype=f16)\nb = cast(x, dtype=bf16)\nhf = cast(h, dtype=f32)\n"
                    "bf = cast(b, dtype=f32)\ni = cast(x, dtype=i8)\nu = cast(x, dtype=u8)\noutput hf, bf, i, u\n")
            self.run_program(text, "lazy", d)
            t = torch.from_numpy(xs.astype(np.float32))
            np.testing.assert_array_equal(np.load(f"{d}/step0_hf.npy"), t.half().float().numpy())
            np.testing.assert_array_equal(np.load(f"{d}/step0_bf.npy"), t.bfloat16().float().numpy())
            small = np.abs(xs) < 2 ** 31  # PyTorch's x86 wraparound holds inside i32
            np.testing.assert_array_equal(np.load(f"{d}/step0_i.npy")[small], t.to(torch.int8).numpy()[small])
            np.testing.assert_array_equal(np.load(f"{d}/step0_u.npy")[small], t.to(torch.uint8).numpy()[small])


class TorchModelsInStorageTypes(unittest.TestCase):
    """tracecache.torch with bf16, f16 and the small integers: the cpu backend computes them
    widened, so a bf16 model is compared with PyTorch's own bf16 result, with float32 PyTorch as
    the arbiter: tracecache's bf16 may be no further from float32 than PyTorch's bf16 is (twice
    that, plus one bf16 ulp of the largest logit), and a replay gives the first call's bits."""

    @classmethod
    def setUpClass(cls):
        import tracecache
        import tracecache.torch  # noqa: F401
        cls.tc = tracecache
        tracecache.configure(mode="once", no_cache=True)

    def check_against_torch(self, model, x, f32_model):
        import tracecache.torch as tct
        compiled = tct.compile(model)
        with torch.no_grad():
            first = compiled(x)
            again = compiled(x)
            ours = first.float()
            theirs = model(x).float()
            arbiter = f32_model(x.float()).float()
        self.assertEqual(first.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(first, again), "a replay gives the first call's bits")
        self.assertEqual(compiled.stats()["traces"], 1)
        ours_err = (ours - arbiter).abs().max().item()
        theirs_err = (theirs - arbiter).abs().max().item()
        scale = arbiter.abs().max().item()
        self.assertLessEqual(ours_err, 2 * theirs_err + scale * 2 ** -8, f"tracecache {ours_err}, torch {theirs_err}")

    def test_resnet_in_bf16(self):
        import copy
        import torchvision
        torch.manual_seed(0)
        f32 = torchvision.models.resnet18(num_classes=10).eval()
        bf16 = copy.deepcopy(f32).to(torch.bfloat16)
        self.check_against_torch(bf16, torch.randn(2, 3, 32, 32).to(torch.bfloat16), f32)

    def test_autocast_region_is_captured_with_its_casts(self):
        torch.manual_seed(1)

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.norm = torch.nn.BatchNorm2d(8)
                self.head = torch.nn.Linear(8, 5)

            def forward(self, x):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = torch.relu(self.norm(self.conv(x)))
                    return self.head(y.mean((2, 3)))

        model = Block().eval()
        self.check_against_torch(model, torch.randn(2, 3, 16, 16), model)

    def test_autocast_training_step_trains_like_eager(self):
        """bf16 autocast with float32 master weights through compile_step: one capture, and the
        losses fall as eager PyTorch's do, step by step within 3% (bf16 noise) of eager's."""
        import copy
        import tracecache.torch as tct
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
        ref = copy.deepcopy(model)

        def make(m, opt):
            def step(x, y):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(m(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                return loss
            return step

        opt = torch.optim.SGD(model.parameters(), lr=0.2)
        compiled = tct.compile_step(make(model, opt), model, opt)
        eager = make(ref, torch.optim.SGD(ref.parameters(), lr=0.2))
        x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,))
        ours = [float(compiled(x, y)) for _ in range(12)]
        theirs = [float(eager(x, y)) for _ in range(12)]
        self.assertEqual(compiled.stats()["traces"], 1)
        for k, (a, b) in enumerate(zip(ours, theirs)):
            self.assertAlmostEqual(a, b, delta=0.03 * b, msg=f"step {k}: {ours} vs {theirs}")
        self.assertLess(ours[-1], 0.9 * ours[0], ours)
        self.assertTrue(all(p.dtype == torch.float32 for p in model.parameters()), "master weights stay f32")

    def test_small_integers_and_f16_elementwise_equal_torch(self):
        import tracecache.torch as tct

        def f(a, b):
            return (a * b + 3).sum(0), torch.maximum(a, b) - a

        compiled = tct.compile(f)
        gen = torch.Generator().manual_seed(2)
        for dtype in (torch.int8, torch.uint8, torch.int16):
            a = torch.randint(0, 120, (4, 6), dtype=dtype, generator=gen)
            b = torch.randint(0, 120, (4, 6), dtype=dtype, generator=gen)
            for got, want in zip(compiled(a, b), f(a, b)):
                self.assertEqual(got.dtype, want.dtype)
                self.assertTrue(torch.equal(got, want), f"{dtype}: {got} vs {want}")
        h = torch.randn(4, 6, generator=gen).half()
        for got, want in zip(compiled(h, h * 2), f(h, h * 2)):
            self.assertEqual(got.dtype, torch.float16)
            self.assertTrue(torch.equal(got, want))

    def test_bf16_round_trips_through_tracecache_tensors_bit_for_bit(self):
        x = torch.randn(3, 5).to(torch.bfloat16)
        t = self.tc.from_torch(x)
        self.assertEqual(t.dtype, "bf16")
        self.assertTrue(torch.equal(t.torch(), x))
        with self.assertRaisesRegex(Exception, "NumPy has no bf16"):
            t.numpy()

    def test_float64_on_cpu_says_what_to_do(self):
        import tracecache.torch as tct
        model = torch.nn.Linear(3, 2).double().eval()
        with self.assertRaisesRegex(TypeError, r"argument 0 has dtype torch.float64.*\.float\(\)"
                                               r".*backend=\"reference\""):
            tct.compile(model)(torch.ones(1, 3, dtype=torch.float64))
        with self.assertRaisesRegex(TypeError, r"parameter 'weight' has dtype torch.float64"):
            tct.compile(model)(torch.ones(1, 3))


if __name__ == "__main__":
    unittest.main()
