"""tracecache's Python core: tensors from and to NumPy, the op set against NumPy in eager, lazy and
sim:h100 sessions, mark_step, zero-copy rules (docs/python.md)."""
import importlib.util
import unittest

import numpy as np

import tracecache as tc

RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class Ops(unittest.TestCase):
    def check_ops(self):
        a, b = f32(3, 4), f32(3, 4)
        x, y = tc.from_numpy(a), tc.from_numpy(b)
        w = f32(4, 5)
        img, k, bias = f32(1, 2, 5, 5), f32(3, 2, 3, 3), f32(3)
        cases = [
            (x + y, a + b), (x - y, a - b), (x * y, a * b), (x / (y * y + 1.0), a / (b * b + 1.0)),
            (-x, -a), (x * 2.0, a * 2.0), (2.0 - x, 2.0 - a), (x @ tc.from_numpy(w), a @ w),
            (tc.ops.relu(x), np.maximum(a, 0)), (tc.ops.exp(x), np.exp(a)),
            (tc.ops.tanh(x), np.tanh(a)), (tc.ops.sum(x, axes=[1]), a.sum(axis=1)),
            (tc.op("mean", x, axes=[0], keepdim=True), a.mean(axis=0, keepdims=True)),
            (tc.ops.reshape(x, shape=[4, 3]), a.reshape(4, 3)),
            (tc.ops.transpose(x, dim0=0, dim1=1), a.T),
            (tc.ops.maximum(x, y), np.maximum(a, b)),
            (tc.ops.conv2d(tc.from_numpy(img), tc.from_numpy(k), tc.from_numpy(bias), stride=[2, 2],
                           padding=[1, 1]), conv2d(img, k, bias, 2, 1)),
        ]
        for got, want in cases:
            self.assertEqual(got.shape, want.shape)
            self.assertEqual(got.dtype, "f32")
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        self.assertTrue(np.array_equal((x > y).numpy(), a > b))
        self.assertTrue(np.array_equal((x < y).numpy(), a < b))
        self.assertEqual((x < y).dtype, "bool")
        s = tc.ops.sum(x)
        self.assertAlmostEqual(s.item(), float(a.sum()), places=4)
        self.assertIsInstance(s.item(), float)
        self.assertEqual(len(x), 3)
        self.assertIn("shape=[3, 4]", repr(x))

    def test_lazy(self):
        tc.configure(mode="lazy", backend="cpu")
        self.check_ops()
        # Lazy: ops only record; mark_step runs them as one graph.
        before = tc.counters()["traces"]
        z = tc.from_numpy(f32(2, 2)) * 3.0
        self.assertFalse(z.is_materialized)
        tc.mark_step()
        self.assertTrue(z.is_materialized)
        self.assertEqual(tc.counters()["traces"], before + 1)

    def test_eager(self):
        tc.configure(mode="eager", backend="cpu")
        self.check_ops()
        z = tc.from_numpy(f32(2, 2)) * 3.0
        self.assertTrue(z.is_materialized)
        self.assertEqual(tc.counters()["traces"], 0)

    def test_sim(self):
        tc.configure(mode="lazy", backend="sim:h100")
        self.assertEqual(tc.settings()["backend"], "sim:h100")
        self.check_ops()

    def test_reference(self):
        tc.configure(mode="lazy", backend="reference")
        self.assertIsNone(tc.settings()["db"])
        self.check_ops()

    def test_integer_and_bool_values(self):
        tc.configure(mode="lazy")
        i = tc.tensor([[1, 2], [3, 4]])
        self.assertEqual(i.dtype, "i64")
        self.assertEqual((i * 2).numpy().tolist(), [[2, 4], [6, 8]])
        self.assertIsInstance(tc.ops.sum(i).item(), int)
        self.assertEqual(tc.tensor([1, 2], dtype="i32").dtype, "i32")
        self.assertEqual(tc.tensor([True, False]).dtype, "bool")
        self.assertEqual(tc.tensor(2.5).shape, ())

    def test_zero_copy_from_numpy(self):
        tc.configure(mode="lazy")
        a = f32(4, 3)
        t = tc.from_numpy(a)
        out = t.numpy()
        self.assertTrue(np.shares_memory(out, a))  # the tensor views the array's memory
        self.assertFalse(out.flags.writeable)       # values are immutable
        del a
        np.testing.assert_array_equal(t.numpy(), out)  # the tensor keeps the array alive

    def test_copy_fallbacks(self):
        tc.configure(mode="lazy")
        a = f32(4, 3)
        t = tc.from_numpy(a.T)  # not C-contiguous: a copy
        self.assertFalse(np.shares_memory(t.numpy(), a))
        np.testing.assert_array_equal(t.numpy(), a.T)
        d = tc.from_numpy(a.astype(np.float64))  # float64: converted to f32
        self.assertEqual(d.dtype, "f32")
        c = tc.tensor(a)  # tensor() always copies
        self.assertFalse(np.shares_memory(c.numpy(), a))

    @unittest.skipUnless(importlib.util.find_spec("torch"), "needs Debian's python3-torch (scripts/setup.sh --peers)")
    def test_torch_roundtrip(self):
        import torch
        tc.configure(mode="lazy")
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        x = tc.from_torch(t)
        self.assertTrue(np.shares_memory(x.numpy(), t.numpy()))
        y = (x + 1.0).torch()
        self.assertIsInstance(y, torch.Tensor)
        self.assertTrue(torch.equal(y, t + 1))
        self.assertFalse(np.shares_memory(tc.from_torch(t.t()).numpy(), t.numpy()))

    def test_random_ops_seeded_by_a_tensor(self):
        # rand_uniform, rand_normal (docs/ops.md): the seed is an i64[2] tensor (seed, offset); the
        # documented values in every mode and on every backend.
        uniform = [0x3e95cb80, 0x3f728b43, 0x3f62136a, 0x3f56e3d0, 0x3e2d2318, 0x3f17b94b, 0x3d029a60, 0x3e786acc]
        normal = [0x3fbdd680, 0xbf0228a2, 0x3e87feed, 0xbed80ce3, 0xbfc990a5, 0xbf84b6c7, 0x3dfa0d76, 0x4027d343]
        for mode, backend in (("eager", "cpu"), ("lazy", "cpu"), ("lazy", "sim:h100")):
            tc.configure(mode=mode, backend=backend)
            seed = tc.from_numpy(np.array([1234567890123, 7], np.int64))
            u = tc.ops.rand_uniform(seed, shape=[2, 4], stream=3)
            z = tc.ops.rand_normal(seed, shape=[8], stream=3)
            self.assertEqual((u.shape, u.dtype), ((2, 4), "f32"))
            self.assertEqual(u.numpy().view(np.uint32).ravel().tolist(), uniform, mode + " " + backend)
            self.assertEqual(z.numpy().view(np.uint32).tolist(), normal, mode + " " + backend)
            other = tc.ops.rand_uniform(tc.from_numpy(np.array([1234567890123, 8], np.int64)), shape=[2, 4], stream=3)
            self.assertNotEqual(other.numpy().view(np.uint32).ravel().tolist(), uniform)
        with self.assertRaisesRegex(Exception, r"the seed must be an i64 tensor of shape \[2\]"):
            tc.ops.rand_uniform(tc.from_numpy(np.array([1, 2], np.int32)), shape=[3])

    def test_op_namespace_covers_the_registry(self):
        names = tc.op_names()
        self.assertIn("conv2d", names)
        for name in names:
            self.assertTrue(callable(getattr(tc.ops, name)), name)


def conv2d(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    return out


if __name__ == "__main__":
    unittest.main()
