"""Python and the CLI open the cache through one set-up path (replay/engine/setup.h): a damaged
database costs caching in both, and both say the same thing about it, naming what to do
(`tracecache verify`, or moving the file aside), the CLI even under -q; a database another
process keeps locked costs caching in both, after one busy timeout, with the same words; `bench`
opens its --db the same way; a bad TRACECACHE_THREADS is refused by both with the same message."""
import os
import sqlite3
import subprocess
import unittest
import warnings

import numpy as np

import tracecache as tc

CLI = os.environ["TRACECACHE_CLI"]
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
TMP = os.environ.get("TRACECACHE_TEST_TMP", ".")
PROGRAM = """tracecache 1
steps 1
input x : f32[4, 3] = normal(seed=1)
param w : f32[3, 2] = normal(seed=2)
h = matmul(x, w)
r = relu(h)
output r
"""


def damaged_db(name):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("plain text, not a database\n" * 100)
    return path


def program():
    path = os.path.join(TMP, "p.trace")
    with open(path, "w") as f:
        f.write(PROGRAM)
    return path


def cli_warning(*args, env=None):
    r = subprocess.run([CLI, "run", program(), *args], capture_output=True, text=True,
                       env=env or CLI_ENV)
    return r.returncode, r.stderr


class DamagedDatabase(unittest.TestCase):
    def test_python_warns_as_the_cli_does_and_names_what_to_do(self):
        path = damaged_db("damaged.db")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tc.configure(db=path)
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("running without the cache", messages[0])
        self.assertIn("tracecache verify", messages[0])
        self.assertIn("aside", messages[0])
        self.assertIsNone(tc.settings()["db"])
        # The results are not lost.
        x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
        self.assertEqual((tc.from_numpy(x) @ tc.from_numpy(w)).numpy().tolist(), [[3.0, 3.0]] * 4)

        code, err = cli_warning("--db", path)
        self.assertEqual(code, 0, err)
        self.assertEqual(err.strip(), "tracecache: warning: " + messages[0])
        # A damaged database is said even under -q (other warnings are not).
        code, err_quiet = cli_warning("--db", path, "-q")
        self.assertEqual(code, 0, err_quiet)
        self.assertEqual(err_quiet, err)

    def test_a_session_made_on_first_use_warns_too(self):
        env = dict(CLI_ENV, TRACECACHE_DB=damaged_db("first_use.db"))
        script = ("import warnings, numpy as np, tracecache as tc\n"
                  "with warnings.catch_warnings(record=True) as caught:\n"
                  "    warnings.simplefilter('always')\n"
                  "    (tc.from_numpy(np.ones(3, np.float32)) + 1.0).numpy()\n"
                  "print('|'.join(str(w.message) for w in caught))\n")
        r = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True,
                           env=dict(env, LD_PRELOAD=os.environ.get("LD_PRELOAD", "")))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tracecache verify", r.stdout)
        self.assertEqual(r.stdout.count("running without the cache"), 1, r.stdout)


    def test_bench_opens_its_db_as_run_does(self):
        path = damaged_db("bench.db")
        _, run_err = cli_warning("--db", path)
        r = subprocess.run([CLI, "bench", program(), "--db", path, "--modes", "lazy,once", "--steps", "2",
                            "--warmup", "0", "--json"], capture_output=True, text=True, env=CLI_ENV)
        self.assertEqual(r.returncode, 0, r.stderr)
        warned = [line for line in r.stderr.splitlines() if line.startswith("tracecache: warning:")]
        self.assertEqual(warned, [run_err.strip()], "said once, in run's words")
        self.assertIn('"step_us"', r.stdout)


class BusyDatabase(unittest.TestCase):
    def test_a_locked_database_costs_caching_in_both_with_one_message(self):
        path = os.path.join(TMP, "busy.db")
        code, err = cli_warning("--db", path)  # creates it
        self.assertEqual(code, 0, err)
        # Another process's connection in exclusive locking mode: nobody else can even read the
        # schema, so opening waits out the busy timeout (5 s) and then runs without the cache.
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("PRAGMA locking_mode=EXCLUSIVE")
            holder.execute("BEGIN EXCLUSIVE")
            holder.execute("SELECT count(*) FROM sqlite_master").fetchall()
            code, err = cli_warning("--db", path)
            self.assertEqual(code, 0, err)
            self.assertIn("running without the cache", err)
            self.assertIn("busy", err)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tc.configure(db=path)
            messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            self.assertEqual(len(messages), 1, messages)
            self.assertEqual(err.strip(), "tracecache: warning: " + messages[0])
            self.assertIsNone(tc.settings()["db"])
            x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
            self.assertEqual((tc.from_numpy(x) @ tc.from_numpy(w)).numpy().tolist(), [[3.0, 3.0]] * 4)
        finally:
            holder.close()
        tc.configure(db=path)  # free again: the cache is back
        self.assertEqual(tc.settings()["db"], path)


class ThreadsFromTheEnvironment(unittest.TestCase):
    def test_a_bad_value_is_refused_by_both_with_one_message(self):
        env = dict(CLI_ENV, TRACECACHE_THREADS="0")
        code, err = cli_warning("--no-cache", env=env)
        self.assertEqual(code, 2, err)
        old = os.environ.get("TRACECACHE_THREADS")
        os.environ["TRACECACHE_THREADS"] = "0"
        try:
            with self.assertRaises(tc.Error) as raised:
                tc.configure(no_cache=True)
        finally:
            if old is None:
                del os.environ["TRACECACHE_THREADS"]
            else:
                os.environ["TRACECACHE_THREADS"] = old
        self.assertEqual(err.strip(), "tracecache: " + str(raised.exception))


class RemoteOptions(unittest.TestCase):
    def test_the_clis_remote_flags_are_settings_with_its_bounds(self):
        for kwargs, words in [({"remote_timeout_ms": 0}, "remote_timeout_ms must be in [1, 60000]"),
                              ({"remote_ttl": -1}, "remote_ttl must be at least 0"),
                              ({"remote_backoff": 0.0}, "remote_backoff must be in [0.001, 86400]")]:
            with self.assertRaisesRegex(tc.Error, words.replace("[", r"\[")):
                tc.configure(no_cache=True, remote="redis://127.0.0.1:1", **kwargs)
        # Accepted values open the client (opening never connects), as the CLI's flags do.
        tc.configure(no_cache=True, remote="redis://127.0.0.1:1", remote_timeout_ms=5, remote_ttl=0,
                     remote_backoff=0.5)
        self.assertEqual(tc.settings()["remote"], "redis://127.0.0.1:1")


if __name__ == "__main__":
    unittest.main()
