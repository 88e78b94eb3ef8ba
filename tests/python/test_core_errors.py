"""Errors from Python: a bad op name, a bad attribute, a shape mismatch raise tracecache.Error (a
RuntimeError) with the message `tracecache run` prints for the same line of a .trace program;
wrong Python types raise TypeError; nothing crashes the interpreter (docs/python.md)."""
import os
import re
import subprocess
import unittest

import numpy as np

import tracecache as tc

CLI = os.environ["TRACECACHE_CLI"]
# In a sanitizer build this interpreter runs with the sanitizer runtime preloaded; the CLI links
# its own, so it runs without the preload.
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
TMP = os.environ.get("TRACECACHE_TEST_TMP", ".")


def cli_message(body):
    """The message `tracecache run` gives for a program whose last op line is `body`, without
    its "tracecache: FILE:LINE:COL: " prefix."""
    path = os.path.join(TMP, "bad.trace")
    with open(path, "w") as f:
        f.write("tracecache 1\ninput x : f32[2, 3] = normal(seed=1)\n"
                "input y : f32[4, 5] = normal(seed=2)\n" + body + "\noutput r\n")
    r = subprocess.run([CLI, "run", path, "--no-cache"], capture_output=True, text=True, env=CLI_ENV)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = r.stderr.strip().splitlines()[-1]
    m = re.match(r"tracecache: .*bad\.trace:\d+:\d+: (.*)$", line)
    assert m, line
    return m.group(1)


class Errors(unittest.TestCase):
    def setUp(self):
        tc.configure(mode="lazy", no_cache=True)
        self.x = tc.from_numpy(np.ones((2, 3), np.float32))
        self.y = tc.from_numpy(np.ones((4, 5), np.float32))

    def assert_same(self, call, body):
        with self.assertRaises(tc.Error) as e:
            call()
        self.assertEqual(str(e.exception), cli_message(body))
        self.assertIsInstance(e.exception, RuntimeError)

    def test_unknown_op(self):
        self.assert_same(lambda: tc.op("ad", self.x, self.x), "r = ad(x, x)")

    def test_unknown_attribute(self):
        self.assert_same(lambda: tc.op("sum", self.x, axis=[1]), "r = sum(x, axis=[1])")

    def test_attribute_of_the_wrong_kind(self):
        self.assert_same(lambda: tc.op("sum", self.x, keepdim=1), "r = sum(x, keepdim=1)")

    def test_missing_attribute(self):
        self.assert_same(lambda: tc.op("reshape", self.x), "r = reshape(x)")

    def test_operand_count(self):
        self.assert_same(lambda: tc.op("relu", self.x, self.x), "r = relu(x, x)")

    def test_shape_mismatch(self):
        self.assert_same(lambda: self.x + self.y, "r = add(x, y)")
        self.assert_same(lambda: tc.ops.matmul(self.x, self.y), "r = matmul(x, y)")

    def test_python_types(self):
        with self.assertRaises(TypeError):
            tc.op("add", self.x, "two")
        with self.assertRaises(TypeError):
            tc.from_numpy([1, 2])
        with self.assertRaises(TypeError):
            tc.compile(lambda a: a)(object())

    def test_bad_settings(self):
        with self.assertRaises(tc.Error) as e:
            tc.configure(backend="nope")
        self.assertIn("nope", str(e.exception))
        with self.assertRaises(tc.Error) as e:
            tc.configure(mode="sometimes")
        self.assertIn("unknown mode 'sometimes'", str(e.exception))

    def test_item_of_many_elements(self):
        with self.assertRaises(tc.Error):
            self.x.item()


if __name__ == "__main__":
    unittest.main()
