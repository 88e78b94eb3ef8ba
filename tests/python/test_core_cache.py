"""Cache settings and reports from Python: counters() has exactly `tracecache run --json`'s
counter names, metrics_report() the PyTorch/XLA layout of `run --metrics`, audit() the content
of `tracecache audit --json`, settings() the CLI's database default (docs/python.md)."""
import json
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
PROGRAM = """tracecache 1
steps 2
input x : f32[4, 3] = normal(seed=1)
param w : f32[3, 2] = normal(seed=2)
h = matmul(x, w)
r = relu(h)
output r
"""


def run_cli(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, check=True,
                       env=CLI_ENV)
    return r.stdout


def python_steps():
    x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    for _ in range(2):
        tc.ops.relu(tc.from_numpy(x) @ tc.from_numpy(w)).numpy()


class Cache(unittest.TestCase):
    def test_database_default_is_the_clis(self):
        tc.configure()
        self.assertEqual(tc.settings()["db"], os.environ["TRACECACHE_DB"])
        self.assertEqual(tc.settings()["mode"], "lazy")
        self.assertEqual(tc.settings()["backend"], "cpu")
        tc.configure(no_cache=True)
        self.assertIsNone(tc.settings()["db"])
        other = os.path.join(TMP, "other.db")
        tc.configure(db=other)
        self.assertEqual(tc.settings()["db"], other)

    def test_a_database_that_cannot_be_opened_costs_caching(self):
        with self.assertWarnsRegex(RuntimeWarning, "running without the cache: cannot create"):
            tc.configure(db="/proc/tracecache/cache.db")  # as `run` does: a warning, no database
        self.assertIsNone(tc.settings()["db"])
        self.assertEqual(len(tc.warnings()), 1)
        self.assertEqual((tc.tensor([1.0]) + 1.0).numpy().tolist(), [2.0])

    def test_counter_names_equal_run_json(self):
        path = os.path.join(TMP, "p.trace")
        with open(path, "w") as f:
            f.write(PROGRAM)
        cli = json.loads(run_cli("run", path, "--json", "--db", os.path.join(TMP, "cli.db")))
        tc.configure(db=os.path.join(TMP, "py.db"))
        python_steps()
        self.assertEqual(list(tc.counters()), list(cli["counters"]))
        self.assertEqual(tc.counters()["traces"], 2)
        self.assertEqual(tc.counters()["compiles"], 1)
        self.assertEqual(tc.counters()["cache_hits_memory"], 1)

    def test_timers_as_run_json(self):
        path = os.path.join(TMP, "p.trace")
        with open(path, "w") as f:
            f.write(PROGRAM)
        cli = json.loads(run_cli("run", path, "--json", "--no-cache"))
        tc.configure(no_cache=True)
        python_steps()
        timers = tc.timers()
        self.assertEqual(sorted(timers), sorted(cli["timers_ms"]))
        for name, t in timers.items():
            self.assertEqual(sorted(t), sorted(cli["timers_ms"][name]), name)
            self.assertLessEqual(t["p50"], t["max"], name)
        self.assertEqual(timers["trace"]["count"], 2)
        self.assertEqual(timers["compile"]["count"], 1)
        self.assertEqual(timers["run"]["count"], 2)

    def test_metrics_report_layout(self):
        tc.configure(no_cache=True)
        python_steps()
        report = tc.metrics_report()
        self.assertRegex(report, r"(?m)^Metric: \w+\n  TotalSamples: \d+\n  Accumulator: [\d.]+ms\n"
                                 r"  Mean: [\d.]+ms\n  Percentiles( \(approximate\))?: 50%=[\d.]+ms; "
                                 r"90%=[\d.]+ms; 99%=[\d.]+ms; max=[\d.]+ms$")
        self.assertRegex(report, r"(?m)^Counter: traces\n  Value: 2$")
        # The same sections, in the same order, as `run --metrics` prints.
        path = os.path.join(TMP, "p.trace")
        with open(path, "w") as f:
            f.write(PROGRAM)
        cli = run_cli("run", path, "--metrics", "--no-cache")
        names = lambda text: re.findall(r"(?m)^(Metric|Counter): (\w+)$", text)
        self.assertTrue(set(names(report)) <= set(names(cli)), (names(report), names(cli)))

    def test_audit_matches_cli(self):
        db = os.path.join(TMP, "audit.db")
        tc.configure(db=db)
        python_steps()
        f = tc.compile(lambda a: a * 2.0, name="audited", version="v1")
        f(np.ones(3, np.float32))
        f(np.ones(5, np.float32))
        f.flush()
        ours = tc.audit()
        cli = json.loads(run_cli("audit", "--json", "--db", db))
        self.assertEqual(ours, cli)
        self.assertEqual(tc.audit(db), cli)
        self.assertEqual([fn["name"] for fn in ours["functions"]], ["audited"])
        self.assertTrue(ours["graphs"])
        with self.assertRaises(tc.Error) as e:
            tc.audit(os.path.join(TMP, "missing.db"))
        self.assertIn("no cache database", str(e.exception))

    def test_audit_filters_match_cli(self):
        db = os.path.join(TMP, "audit_filters.db")
        tc.configure(db=db)
        python_steps()
        f = tc.compile(lambda a: a + 1.0, name="filtered", version="v1")
        f(np.ones(3, np.float32))
        f(np.ones(4, np.float32))
        f.flush()
        everything = tc.audit()
        prefix = everything["graphs"][0]["hash"][:10]
        for kwargs, flags in [({"function": "filtered"}, ["--function", "filtered"]),
                              ({"kind": "compile"}, ["--kind", "compile"]),
                              ({"since": "1h"}, ["--since", "1h"]),
                              ({"graph": prefix}, ["--graph", prefix])]:
            ours = tc.audit(**kwargs)
            self.assertEqual(ours, json.loads(run_cli("audit", "--json", "--db", db, *flags)), kwargs)
        self.assertEqual([g["hash"][:10] for g in tc.audit(graph=prefix)["graphs"]], [prefix])
        self.assertEqual(tc.audit(function="no such function")["functions"], [])
        with self.assertRaises(tc.Error) as e:
            tc.audit(since="yesterday-ish")
        self.assertIn("is not a time", str(e.exception))
        with self.assertRaises(tc.Error) as e:
            tc.audit(kind="recompile")
        self.assertIn("is not a kind of graph event", str(e.exception))


if __name__ == "__main__":
    unittest.main()
