"""bench/torch_models.py, the torchvision coverage sweep: its machinery, not the models' results.

- The comparison and the verdicts: outputs equal within 1e-4 pass, another value, shape, dtype or
  structure is wrong, graph breaks are counted, UnsupportedOpError/CaptureError are unsupported
  and anything else a crash, the training bound against float64.
- `--self-test`: tiny models built to pass, be wrong (a scale changed before the compiled call;
  a weight changed before the replay), hit an unmapped op (a custom op, unsupported or a graph
  break), raise CaptureError, raise another error, abort, sleep forever (a timeout) and hold more
  memory than the limit each land in their category, in a worker process of their own.
- `--quick --json F`: the JSON is well formed and every category is the one the verdict
  functions give for the record's own numbers; the printed report is the JSON's. Which models
  pass is not asserted.
- `--from-json F` prints the report of a saved sweep: the one the sweep printed.
- `--help`, and bad arguments exit 2 with a message.

Run by ctest as python.test_torch_models_sweep (tests/python/run_test.sh)."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from collections import OrderedDict

import torch

import tracecache.torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "torch_models.py")
spec = importlib.util.spec_from_file_location("torch_models_sweep", SCRIPT)
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)

RECORD_KEYS = {"family": str, "name": str, "kind": str, "category": str, "breaks": int, "seconds": float}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class Compare(unittest.TestCase):
    def test_equal_outputs_and_relative_error(self):
        want = torch.tensor([1.0, -4.0, 2.0])
        self.assertEqual(sweep.compare(want.clone(), want), (0.0, "output"))
        err, where = sweep.compare([want + torch.tensor([0.0, 0.0, 0.002])], [want])
        self.assertAlmostEqual(err, 0.002 / 4.0, delta=1e-7)  # 0.002 in float32
        self.assertEqual(where, "[0]")

    def test_shape_dtype_and_structure_mismatches(self):
        x = torch.zeros(2, 3)
        for got, want, text in [(x, torch.zeros(3, 2), "shape"), (x.long(), x, "dtype"),
                                ([{"boxes": x}], [{"scores": x}], "structure"), ((x,), (x, x), "structure"),
                                ((x, 1), (x, 2), "1"), ((x, x), (x, 3), "Tensor")]:
            with self.assertRaises(sweep.Mismatch) as e:
                sweep.compare(got, want)
            self.assertIn(text, str(e.exception))

    def test_detection_style_results_and_ordered_dicts(self):
        want = [{"boxes": torch.ones(2, 4), "labels": torch.tensor([3, 1]), "scores": torch.tensor([0.5, 0.25])}]
        got = [{"boxes": torch.ones(2, 4), "labels": torch.tensor([3, 2]), "scores": torch.tensor([0.5, 0.25])}]
        err, where = sweep.compare(got, want)
        self.assertEqual(where, "[0]['labels']")
        self.assertAlmostEqual(err, 1 / 3)
        self.assertEqual(sweep.compare(OrderedDict(out=torch.ones(1)), {"out": torch.ones(1)}), (0.0, "['out']"))
        self.assertEqual(sweep.compare(torch.zeros(0, 4), torch.zeros(0, 4))[0], 0.0)

    def test_non_finite_and_zero_references(self):
        nan = torch.tensor([math.nan, 1.0])
        self.assertEqual(sweep.relative_error(nan.clone(), nan), 0.0)
        self.assertEqual(sweep.relative_error(torch.tensor([0.0, 1.0]), nan), math.inf)
        self.assertEqual(sweep.relative_error(torch.tensor([1e-9]), torch.tensor([0.0])), math.inf)

    def test_graph_breaks_counted_when_the_package_reports_them(self):
        class Without:
            pass

        class With:
            def __init__(self, breaks):
                self.breaks = breaks

            def graph_breaks(self):
                return self.breaks

        self.assertEqual(sweep.graph_breaks(Without()), ([], []))
        self.assertEqual(sweep.graph_breaks(With([])), ([], []))
        breaks = [("aten.nonzero.default", "no mapping", "model.py:3"), ("torchvision.nms.default", "no mapping", None)]
        self.assertEqual(sweep.graph_breaks(With(breaks))[0], ["aten.nonzero.default", "torchvision.nms.default"])


class Verdicts(unittest.TestCase):
    def test_inference(self):
        self.assertEqual(sweep.inference_verdict(1e-6, "output", None, [], 0.0), ("pass", None))
        self.assertEqual(sweep.inference_verdict(1e-6, "output", None, ["aten.x", "aten.y", "aten.x"], 0.0),
                         ("pass-breaks", "3 graph breaks: aten.x, aten.y"))
        self.assertEqual(sweep.inference_verdict(1e-3, "[0]", None, [], 0.0)[0], "wrong")
        self.assertEqual(sweep.inference_verdict(1e-3, "[0]", None, ["aten.x"], 0.0)[0], "wrong")
        self.assertEqual(sweep.inference_verdict(math.nan, None, "shape [1], eager [2]", [], 0.0),
                         ("wrong", "shape [1], eager [2]"))
        category, error = sweep.inference_verdict(0.0, "output", None, [], 0.5)
        self.assertEqual(category, "wrong")
        self.assertIn("replay", error)

    def test_exceptions(self):
        unsupported = tracecache.torch.UnsupportedOpError("tracecache.torch: no mapping for aten.x.default", "aten.x.default")
        self.assertEqual(sweep.classify_exception(unsupported)[:2], ("unsupported", "aten.x.default"))
        capture = tracecache.torch.CaptureError("tracecache.torch: a write through a view\nsecond line")
        self.assertEqual(sweep.classify_exception(capture), ("unsupported", None, "tracecache.torch: a write through a view"))
        self.assertEqual(sweep.classify_exception(TypeError("argument 0 is list")),
                         ("crash", None, "TypeError: argument 0 is list"))

    def test_training_bound_against_float64(self):
        self.assertEqual(sweep.train_verdict([(1, 0.0, "loss 1", 0.0)]), ("pass", None))
        self.assertEqual(sweep.train_verdict([(1, 4e-3, "w", 1e-3), (3, 1e-6, "w", 0.0)])[0], "pass")
        category, error = sweep.train_verdict([(1, 1e-5, "w", 1e-5), (3, 4.1e-3, "fc.bias", 1e-3)])
        self.assertEqual(category, "wrong")
        self.assertIn("after step 3: distance from float64 0.0041 (fc.bias)", error)
        self.assertEqual(sweep.train_verdict([(1, 2e-3, "w", 1e-4), (3, 1e-3, "w", 1e-3)])[0], "wrong")
        self.assertEqual(sweep.train_verdict([(1, math.inf, "w", 1e-3)])[0], "wrong")
        self.assertEqual(sweep.train_verdict([(1, math.nan, "w", 1e-3)])[0], "wrong")
        self.assertEqual(sweep.dropout_verdict([7.0, 5.0], [7.0, 6.0])[0], "pass")
        self.assertEqual(sweep.dropout_verdict([7.0, 5.0], [7.0, math.nan])[0], "wrong")
        self.assertEqual(sweep.dropout_verdict([7.0, 7.5], [7.0, 6.0])[0], "inconclusive")

    def test_distance_is_relative_to_the_update(self):
        start = {"w": torch.zeros(3), "b": torch.ones(2), "n": torch.tensor(0)}
        ref = {"w": torch.tensor([0.0, 0.1, -0.2], dtype=torch.float64),
               "b": torch.tensor([1.0, 1.0 + 1e-18], dtype=torch.float64), "n": torch.tensor(3)}
        same = {"w": torch.tensor([0.0, 0.1, -0.2]), "b": torch.ones(2), "n": torch.tensor(3)}
        d, _ = sweep.distance([2.0], same, [2.0], ref, start)
        self.assertLess(d, 1e-6)
        off = dict(same, w=torch.tensor([0.0, 0.1, -0.19]))
        d, where = sweep.distance([2.0], off, [2.0], ref, start)
        self.assertAlmostEqual(d, 0.05, places=6)
        self.assertEqual(where, "w")
        # A tensor whose float64 update is rounding is measured against 1e-3 of the largest update.
        rounding = dict(same, b=torch.tensor([1.0, 1.0 + 1e-7]))
        d, where = sweep.distance([2.0], rounding, [2.0], ref, start)
        self.assertEqual(where, "b")
        self.assertAlmostEqual(d, 1.19e-7 / (1e-3 * 0.2), delta=0.01)
        self.assertEqual(sweep.distance([2.0], dict(same, n=torch.tensor(2)), [2.0], ref, start), (math.inf, "n"))
        self.assertEqual(sweep.distance([2.1], same, [2.0], ref, start)[1], "loss 1")


class CommandLine(unittest.TestCase):
    def test_help(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        for option in ("--models", "--family", "--no-train", "--no-inference", "--timeout", "--threads", "--json",
                       "--quick"):
            self.assertIn(option, p.stdout)
        usage = p.stdout.split("\n\n")[0]
        self.assertNotIn("--self-test", usage)
        self.assertNotIn("--worker", usage)

    def test_bad_arguments_exit_2_with_a_message(self):
        for args, text in [(["--models", "resnet81"], "unknown model 'resnet81'; did you mean resnet18"),
                           (["--family", "audio"], "unknown family 'audio'"),
                           (["--timeout", "0"], "--timeout must be > 0"),
                           (["--threads", "0"], "--threads must be >= 1"),
                           (["--no-inference", "--no-train"], "leave nothing to run"),
                           (["--models", "fcn_resnet50", "--family", "video"], "is in --family video"),
                           (["--quick", "--models", "resnet18"], "--quick runs a fixed selection"),
                           (["--from-json", "/nonexistent/sweep.json"], "not a sweep saved with --json"),
                           (["--from-json", "sweep.json", "--quick"], "--from-json takes no other option"),
                           (["--frobnicate"], "unrecognized arguments")]:
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn(text, p.stderr, args)


class Sweeps(unittest.TestCase):
    def sweep_json(self, *args):
        """The run's process and JSON; the report --from-json prints from that JSON must be the
        one the run printed."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sweep.json")
            p = run(*args, "--json", path)
            with open(path) as f:
                doc = json.load(f)
            again = run("--from-json", path)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, p.stdout)
        return p, doc

    def check_records(self, doc, stdout):
        for r in doc["records"]:
            for key, kind in RECORD_KEYS.items():
                self.assertIsInstance(r[key], kind, (key, r))
            self.assertIn("error", r)
            self.assertIn("max_rel_err", r)
            categories = sweep.CATEGORIES if r["kind"] == "inference" else sweep.TRAIN_CATEGORIES
            self.assertIn(r["category"], categories, r)
            self.assertEqual(r["error"] is None, r["category"] == "pass", r)
            if r["category"] in ("unsupported", "crash"):
                continue
            # A run that finished: its category is the verdict of its own numbers.
            if r["kind"] == "inference":
                err = float(r["max_rel_err"])
                mismatch = None if r["category"] != "wrong" or not math.isnan(err) else r["error"]
                self.assertEqual(r["breaks"], len(r["break_ops"]))
                got = sweep.inference_verdict(err, None, mismatch, r["break_ops"], float(r["replay_rel_err"]))
            elif r["kind"] == "train":
                d = r["distances"]
                self.assertEqual(r["checkpoints"], sorted({1, r["steps"]}))
                got = sweep.train_verdict([(k, float(a), w, float(b)) for k, a, w, b in
                                           zip(r["checkpoints"], d["tc"], d["tc_worst"], d["eager"])])
            else:
                got = sweep.dropout_verdict(r["losses_eager"], r["losses_tc"])
            self.assertEqual(got[0], r["category"], r)
        self.assertEqual(stdout.strip(), sweep.report(doc).strip())

    def test_self_test_lands_each_model_in_its_category(self):
        p, doc = self.sweep_json("--self-test", "--timeout", "600")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_records(doc, p.stdout)
        by = {r["name"]: r for r in doc["records"]}
        self.assertEqual(set(by), {name for name, *_ in sweep.SELF_TESTS})
        self.assertEqual(by["st_pass"]["category"], "pass")
        self.assertLessEqual(by["st_pass"]["max_rel_err"], 1e-4)
        self.assertTrue(by["st_pass"]["replay_identical"])
        self.assertEqual(by["st_wrong"]["category"], "wrong")
        self.assertAlmostEqual(by["st_wrong"]["max_rel_err"], 0.5, places=5)
        self.assertEqual(by["st_replay_differs"]["category"], "wrong")
        self.assertIn("replay", by["st_replay_differs"]["error"])
        unmapped = by["st_unmapped"]
        if unmapped["category"] == "unsupported":
            self.assertEqual(unmapped["op"], "tracecache_sweep_selftest.unmapped.default")
        else:
            self.assertEqual(unmapped["category"], "pass-breaks")
            self.assertGreaterEqual(unmapped["breaks"], 1)
        self.assertEqual(by["st_capture_error"]["category"], "unsupported")
        self.assertIn("self-test: a forward tracecache cannot capture", by["st_capture_error"]["error"])
        for name, text in [("st_raise", "ValueError: self-test: a forward that raises"), ("st_abort", "SIGABRT"),
                           ("st_hang", "timeout after 5 s"), ("st_memory", "over the limit of 1.5 GB")]:
            self.assertEqual(by[name]["category"], "crash", by[name])
            self.assertIn(text, by[name]["error"])
        self.assertIn(f"| self-test | {len(sweep.SELF_TESTS)} |", p.stdout)

    def test_quick_json_is_well_formed_and_consistent(self):
        p, doc = self.sweep_json("--quick")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for key in ("command", "date", "threads", "timeout", "memory_limit_gb", "environment", "records"):
            self.assertIn(key, doc)
        for key in ("torch", "torchvision", "cpu", "blas", "commit"):
            self.assertIn(key, doc["environment"])
        self.assertEqual([(r["family"], r["name"], r["kind"]) for r in doc["records"]], sweep.QUICK)
        self.check_records(doc, p.stdout)
        self.assertRegex(p.stderr, r"\[1/4\] resnet18 \.\.\. [a-z-]+ \d+\.\ds")


if __name__ == "__main__":
    unittest.main()
