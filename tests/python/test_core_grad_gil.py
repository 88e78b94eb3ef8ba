"""Autodiff from Python (tracecache.grad of a small MLP against NumPy, no_grad) and the GIL: a
long call (mark_step, a compiled call) lets another Python thread run (docs/python.md)."""
import sys
import threading
import time
import unittest

import numpy as np

import tracecache as tc

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def numpy_mlp_grads(x, w1, b1, w2, target):
    h = x @ w1 + b1
    a = np.maximum(h, 0)
    y = a @ w2
    d = y - target
    loss = (d * d).mean()
    gy = 2 * d / d.size
    gw2 = a.T @ gy
    ga = gy @ w2.T
    gh = ga * (h > 0)
    return loss, x.T @ gh, gh.sum(axis=0), gw2


class Grad(unittest.TestCase):
    def check_mlp(self):
        x, w1, b1, w2, target = f32(5, 4), f32(4, 6), f32(6), f32(6, 3), f32(5, 3)
        tw1, tb1, tw2 = (tc.from_numpy(v).requires_grad_() for v in (w1, b1, w2))
        self.assertTrue(tw1.requires_grad)
        h = tc.ops.relu(tc.from_numpy(x) @ tw1 + tb1)
        d = h @ tw2 - tc.from_numpy(target)
        loss = tc.ops.mean(d * d)
        g1, gb, g2 = tc.grad(loss, tw1, tb1, tw2)
        want = numpy_mlp_grads(x, w1, b1, w2, target)
        # Relative: the loss (about 74 here) is a sum of products whose f32 rounding depends on the
        # BLAS kernel (one ulp of 74 is 7.6e-6, so an absolute places=5 failed on an AVX2 machine).
        self.assertLessEqual(abs(loss.item() - float(want[0])), 1e-6 * abs(float(want[0])) + 1e-6)
        for got, exp in zip((g1, gb, g2), want[1:]):
            np.testing.assert_allclose(got.numpy(), exp, rtol=1e-4, atol=1e-5)
        with tc.no_grad():
            self.assertFalse((tw1 * 2.0).requires_grad)
        self.assertTrue((tw1 * 2.0).requires_grad)

    def test_lazy(self):
        tc.configure(mode="lazy", no_cache=True)
        self.check_mlp()

    def test_eager(self):
        tc.configure(mode="eager")
        self.check_mlp()

    def test_grad_errors(self):
        tc.configure(mode="lazy", no_cache=True)
        w = tc.from_numpy(f32(3))
        with self.assertRaises(tc.Error):
            tc.grad(tc.ops.sum(w * 2.0), w)  # w does not require a gradient


class Gil(unittest.TestCase):
    def run_with_counter(self, long_call):
        """How far a second thread counted while long_call ran. With a switch interval far longer
        than the test, the interpreter never takes the GIL from the main thread, so the counting
        thread (which gives the GIL up after each step) can only run while the main thread has
        released it itself: the count shows a release, not how fast anything ran."""
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1000)
        started, stop = threading.Event(), threading.Event()
        count = [0]

        def spin():
            started.set()
            while not stop.is_set():
                count[0] += 1
                time.sleep(0)  # releases the GIL

        t = threading.Thread(target=spin)
        try:
            t.start()
            started.wait()
            seen_before = count[0]
            long_call()
            return count[0] - seen_before
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)

    def test_mark_step_releases_the_gil(self):
        tc.configure(mode="lazy", no_cache=True, threads=1)
        a = tc.from_numpy(f32(384, 384))
        y = a
        for _ in range(12):
            y = tc.ops.tanh(y @ a)
        # The compile and the run of a graph of twelve 384x384 matmuls, GIL released.
        self.assertGreater(self.run_with_counter(tc.mark_step), 0)

    def test_compiled_call_releases_the_gil(self):
        tc.configure(mode="lazy", no_cache=True, threads=1)

        def chain(a):
            y = a
            for _ in range(12):
                y = tc.ops.tanh(y @ a)
            return y

        f = tc.compile(chain)
        a = f32(384, 384)
        f(a)  # the trace (fn runs with the GIL taken back)
        out = []
        self.assertGreater(self.run_with_counter(lambda: out.append(f(a).numpy())), 0)
        self.assertEqual(f.stats()["traces"], 1)


if __name__ == "__main__":
    unittest.main()
