"""tracecache.compile: the C++ CompiledFunction from Python: trace once, guards and recompile
reasons, dynamic dims, scalar guards, Python errors from fn, persistent entries across two
processes (docs/python.md)."""
import json
import os
import subprocess
import sys
import textwrap
import unittest

import numpy as np

import tracecache as tc

RNG = np.random.default_rng(3)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def layer(x, w):
    return tc.ops.relu(x @ w)


class Compile(unittest.TestCase):
    def setUp(self):
        tc.configure(mode="lazy", backend="cpu", no_cache=True)

    def test_traces_once_and_replays(self):
        f = tc.compile(layer, automatic_dynamic=False)
        x, w = f32(4, 3), f32(3, 2)
        for _ in range(3):
            out = f(x, w)  # NumPy arguments are converted (zero-copy)
            np.testing.assert_allclose(out.numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
        s = f.stats()
        self.assertEqual((s["calls"], s["traces"], s["entries"], s["recompiles"]), (3, 1, 1, 0))
        self.assertEqual(s["hits_per_entry"], [2])

    def test_new_shape_recompiles_with_reason(self):
        f = tc.compile(layer, automatic_dynamic=False)
        w = f32(3, 2)
        f(f32(4, 3), w)
        out = f(f32(8, 3), w)
        self.assertEqual(out.shape, (8, 2))
        self.assertEqual(f.stats()["recompiles"], 1)
        reasons = f.recompile_reasons()
        self.assertEqual(len(reasons), 1)
        self.assertIn("input 0 'x': size of dim 0 expected 4, actual 8", reasons[0])
        self.assertGreaterEqual(tc.counters()["recompiles"], 1)

    def test_dynamic_dim_serves_new_sizes_without_tracing(self):
        f = tc.compile(layer, dynamic_dims=[(0, 0)])
        w = f32(3, 2)
        for batch in (4, 6, 9):
            x = f32(batch, 3)
            np.testing.assert_allclose(f(x, w).numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
        s = f.stats()
        self.assertEqual(s["traces"], 1)
        self.assertGreaterEqual(s["specializations"], 2)

    def test_scalars_are_guarded_by_value(self):
        seen = []

        def scale(x, k):
            seen.append(k)
            return x * k

        f = tc.compile(scale)
        x = f32(2, 2)
        np.testing.assert_allclose(f(x, 2.0).numpy(), x * 2, rtol=1e-6)
        np.testing.assert_allclose(f(x, 2.0).numpy(), x * 2, rtol=1e-6)
        np.testing.assert_allclose(f(x, 3.0).numpy(), x * 3, rtol=1e-6)
        self.assertEqual(seen, [2.0, 3.0])  # fn runs only when it must trace

    def test_dynamic_scalar_is_a_tensor(self):
        f = tc.compile(lambda x, k: x * k, dynamic_scalars=[1])
        x = f32(2, 2)
        for k in (2.0, 5.0):
            np.testing.assert_allclose(f(x, k).numpy(), x * k, rtol=1e-6)
        self.assertEqual(f.stats()["traces"], 1)

    def test_several_outputs_are_a_tuple(self):
        f = tc.compile(lambda a, b: (a + b, a * b))
        a, b = f32(3), f32(3)
        s, p = f(a, b)
        np.testing.assert_allclose(s.numpy(), a + b, rtol=1e-6)
        np.testing.assert_allclose(p.numpy(), a * b, rtol=1e-6)

    def test_errors_of_fn_reach_the_caller(self):
        def bad(x):
            raise KeyError("from fn")

        with self.assertRaises(KeyError):
            tc.compile(bad)(f32(2))

        def mismatch(x, y):
            return x + y

        with self.assertRaises(tc.Error) as e:
            tc.compile(mismatch)(f32(2, 3), f32(4, 5))
        self.assertIn("op 'add'", str(e.exception))

        with self.assertRaises(tc.Error):
            tc.compile(lambda x: 3)(f32(2))

    def test_proxies_do_not_outlive_their_trace(self):
        kept = []

        def keep(x):
            kept.append(x)
            return x * 2.0

        tc.compile(keep)(f32(2))
        with self.assertRaises(tc.Error) as e:
            kept[0].numpy()
        self.assertIn("trace", str(e.exception))

    def test_graph_breaks_run_the_host_op_on_replays(self):
        runs = []

        def cumsum(payload, arrays):
            runs.append(bytes(payload))
            return [np.cumsum(arrays[0], axis=-1).astype(np.float32)]

        def fn(x):
            (c,) = tc._host_op(b"cumsum", [tc.ops.relu(x)], "cumsum in a test")
            return c * 2

        f = tc.compile(fn, host_op=cumsum)
        for _ in range(3):
            x = f32(2, 5)
            np.testing.assert_allclose(f(x).numpy(), np.cumsum(np.maximum(x, 0), axis=-1) * 2, rtol=1e-5)
        self.assertEqual(f.stats()["traces"], 1)
        self.assertEqual(f.stats()["host_op_runs"], 2)
        self.assertEqual(runs, [b"cumsum"] * 3)

    def test_a_failing_host_op_raises_its_own_error(self):
        def broken(payload, arrays):
            raise KeyError("no such op")
        f = tc.compile(lambda x: tc._host_op(b"x", [x], "broken")[0], host_op=broken)
        with self.assertRaises(KeyError):
            f(f32(2))
        with self.assertRaises(tc.Error):
            tc._host_op(b"x", [], "outside a trace")

    def test_values_read_are_guarded(self):
        def fn(x):
            return x * 2 if x.numpy()[0] > 0 else -x
        f = tc.compile(fn)
        for v in (1.0, -1.0, 2.0, -3.0):
            x = np.array([v, 1.0], dtype=np.float32)
            np.testing.assert_allclose(f(x).numpy(), fn(tc.from_numpy(x)).numpy())
        self.assertEqual(f.stats()["traces"], 4, "the value itself is guarded: each value its own path")

    def test_the_default_name_is_module_and_qualified_name(self):
        self.assertEqual(tc.compile(layer).name, "__main__:layer")

    def test_eager_session_cannot_compile(self):
        tc.configure(mode="eager")
        with self.assertRaises(tc.Error) as e:
            tc.compile(layer)(f32(2, 3), f32(3, 2))
        self.assertIn("tracecache.compile needs", str(e.exception))


CHILD = textwrap.dedent("""
    import json, numpy as np, tracecache as tc
    def step(x, w):
        return tc.ops.tanh(x @ w) * 0.5
    f = tc.compile(step, name="test_core_compile.step", version="1")
    x = np.ones((4, 3), np.float32); w = np.full((3, 2), 0.25, np.float32)
    out = [f(x, w).numpy().tolist() for _ in range(2)]
    print(json.dumps({"counters": tc.counters(), "stats": f.stats(), "out": out,
                      "db": tc.settings()["db"]}))
""")


class Persistent(unittest.TestCase):
    def run_child(self, db):
        env = dict(os.environ, TRACECACHE_DB=db)
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                           check=True)
        return json.loads(r.stdout)

    def test_second_process_traces_and_compiles_nothing(self):
        db = os.path.join(os.environ.get("TRACECACHE_TEST_TMP", "."), "persist.db")
        first = self.run_child(db)
        self.assertEqual(first["db"], db)  # TRACECACHE_DB is the default database, as for the CLI
        self.assertEqual(first["counters"]["traces"], 1)
        self.assertGreaterEqual(first["counters"]["compiles"], 1)
        second = self.run_child(db)
        self.assertEqual(second["counters"]["traces"], 0)
        self.assertEqual(second["counters"]["compiles"], 0)
        self.assertEqual(second["stats"]["traces"], 0)
        self.assertEqual(second["out"], first["out"])

    def test_default_version_is_the_same_in_every_process(self):
        # The default user version digests fn's code; a set literal's order follows string
        # hashing (PYTHONHASHSEED), so it is digested sorted.
        code = textwrap.dedent("""
            import tracecache as tc
            def fn(x):
                return x if "a" in {"alpha", "beta", "gamma", "delta"} else x
            print(tc._code_digest(fn.__code__))
        """)
        digests = set()
        for seed in ("1", "2", "3"):
            env = dict(os.environ, PYTHONHASHSEED=seed)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, check=True)
            digests.add(r.stdout.strip())
        self.assertEqual(len(digests), 1, digests)


if __name__ == "__main__":
    unittest.main()
