"""The remote cache tier from Python (docs/remote-cache.md): configure(remote=...) with a
real redis-server on a unix socket; a second session on a new local database compiles nothing,
its hit served by the remote; settings() reports the remote; a bad URL or mode is a tc.Error."""
import os
import shutil
import subprocess
import time
import unittest

import numpy as np

import tracecache as tc

TMP = os.environ.get("TRACECACHE_TEST_TMP", ".")


def steps():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    w = np.ones((3, 2), np.float32)
    return tc.ops.relu(tc.from_numpy(x) @ tc.from_numpy(w)).numpy()


@unittest.skipUnless(shutil.which("redis-server"), "redis-server is not installed (scripts/setup.sh)")
class Remote(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(TMP, "redis")
        os.makedirs(cls.dir, exist_ok=True)
        cls.sock = os.path.join(cls.dir, "redis.sock")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        cls.server = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", cls.sock, "--save", "", "--appendonly", "no",
             "--dir", cls.dir], stdout=subprocess.DEVNULL, env=env)
        for _ in range(200):
            if os.path.exists(cls.sock):
                break
            time.sleep(0.05)
        cls.url = "unix://" + cls.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()

    def test_a_second_machine_compiles_nothing(self):
        tc.configure(db=os.path.join(TMP, "a.db"), remote=self.url)
        self.assertEqual(tc.settings()["remote"], self.url)
        self.assertEqual(tc.settings()["remote_mode"], "read-write")
        first = steps()
        self.assertEqual(tc.counters()["compiles"], 1)
        tc.configure(db=os.path.join(TMP, "b.db"), remote=self.url, remote_mode="read-only")
        second = steps()
        self.assertEqual(tc.counters()["compiles"], 0)
        self.assertEqual(tc.counters()["cache_hits_remote"], 1)
        np.testing.assert_array_equal(first, second)
        self.assertEqual(tc.warnings(), [])

    def test_bad_settings_are_value_errors(self):
        with self.assertRaisesRegex(tc.Error, "redis://HOST:PORT"):
            tc.configure(remote="http://nowhere", no_cache=True)
        with self.assertRaisesRegex(tc.Error, "remote_mode"):
            tc.configure(remote=self.url, remote_mode="write-only", no_cache=True)


if __name__ == "__main__":
    unittest.main()
