"""tracecache.torch on ordinary programs: graph breaks (an unmapped op runs in PyTorch between
tracecache graphs), value reads (`.item()`, `bool()`, `.tolist()`: a branch per value, guarded),
`explain`, `fullgraph`, calls with lists, dicts and keywords, state names that are not Python
identifiers, trace once whatever the session's mode, and a second process that captures,
lowers and traces nothing, for a compiled module with breaks and for a training step.

Run by ctest as python.test_torch_breaks (tests/python/run_test.sh)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
from torch import nn

import torch_models
import tracecache
import tracecache.torch

HERE = os.path.dirname(os.path.abspath(__file__))
CUMSUM_LINE = "y = torch.cumsum(self.fc(x), dim=1)"
BRANCH_LINE = "if y.sum() > 0:"


class Branchy(nn.Module):
    """cumsum (no mapping: a graph break) and a branch on a value (a value read)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = torch.cumsum(self.fc(x), dim=1)
        if y.sum() > 0:
            return y * 2
        return -y


def branchy():
    torch.manual_seed(0)
    return Branchy().eval()


def inputs(sign, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 4, generator=g).abs() + 1) * sign * 3


class Breaks(unittest.TestCase):
    def setUp(self):
        tracecache.configure(no_cache=True)

    def test_a_break_and_a_branch_run_compiled_and_equal_eager(self):
        model = branchy()
        compiled = tracecache.torch.compile(model)
        captures = tracecache.torch.stats()["captures"]
        for k, sign in enumerate([1, 1, -1, -1, 1]):
            x = inputs(sign, k)
            torch.testing.assert_close(compiled(x), model(x).detach(), rtol=1e-5, atol=1e-6)
        stats = compiled.stats()
        self.assertEqual(stats["traces"], 2, "one path per branch; the others replay")
        self.assertEqual(stats["entries"], 2)
        self.assertEqual(tracecache.torch.stats()["captures"] - captures, 2)
        self.assertGreaterEqual(stats["host_op_runs"], 3, "replays ran the break in PyTorch")
        ops = [b[0] for b in compiled.graph_breaks()]
        self.assertEqual(ops, ["aten.cumsum.default", "value read"])
        self.assertIn(CUMSUM_LINE, compiled.graph_breaks()[0][2])
        self.assertIn(BRANCH_LINE, compiled.graph_breaks()[1][2])

    def test_explain_lists_graphs_and_breaks_without_compiling(self):
        compiles = tracecache.counters()["compiles"]
        out = tracecache.torch.explain(branchy(), inputs(1, 0))
        self.assertEqual(out.graphs, 3)
        self.assertEqual(out.graph_break_count, 2)
        self.assertEqual(out.breaks[0].op, "aten.cumsum.default")
        self.assertIn("no mapping", out.breaks[0].reason)
        self.assertIn(CUMSUM_LINE, out.breaks[0].where)
        self.assertEqual(out.breaks[1].op, "value read")
        self.assertIn(BRANCH_LINE, out.breaks[1].where)
        self.assertIn("linear", out.ops_per_graph[0])
        self.assertIn("2 graph breaks", str(out))
        self.assertEqual(tracecache.counters()["compiles"], compiles, "explain compiles nothing")

    def test_fullgraph_makes_a_break_an_error(self):
        with self.assertRaises(tracecache.torch.UnsupportedOpError) as caught:
            tracecache.torch.compile(branchy(), fullgraph=True)(inputs(1, 0))
        self.assertEqual(caught.exception.op, "aten.cumsum.default")
        self.assertIn(CUMSUM_LINE, str(caught.exception))

    def test_lazy_capture_breaks_too(self):
        model = branchy()
        compiled = tracecache.torch.compile(model, mode="lazy")
        for k, sign in enumerate([1, -1, 1]):
            x = inputs(sign, k)
            torch.testing.assert_close(compiled(x), model(x).detach(), rtol=1e-5, atol=1e-6)

    def test_tolist_and_item_are_value_reads(self):
        def fn(x, n):
            k = int(n.item())
            scale = sum(x[0].tolist())
            return x[:, :k] * scale
        compiled = tracecache.torch.compile(fn)
        x = torch.arange(12.0).reshape(3, 4)
        for k in (2, 3, 2):
            n = torch.tensor(k)
            torch.testing.assert_close(compiled(x, n), fn(x, n))
        y = x + 1  # a new value of the row .tolist() read: another path, never a stale constant
        torch.testing.assert_close(compiled(y, torch.tensor(2)), fn(y, torch.tensor(2)))
        self.assertEqual(compiled.stats()["entries"], 3)

    def test_a_data_dependent_shape_breaks_and_guards_its_shape(self):
        def fn(x):
            return x[x > 0].sum() + (x > 0).nonzero().shape[0]
        compiled = tracecache.torch.compile(fn)
        for x in (torch.tensor([1.0, -2.0, 3.0]), torch.tensor([4.0, -1.0, 1.0]), torch.tensor([1.0, 1.0, 1.0])):
            torch.testing.assert_close(compiled(x), fn(x))

    def test_a_break_with_a_rank_0_result(self):
        # torch.min of a whole tensor (a break) gives a rank-0 tensor, which stays rank 0 across
        # the break (detection models' transform reads one this way).
        def fn(x):
            return x - torch.min(x * 2).to(torch.float32) * 3
        compiled = tracecache.torch.compile(fn)
        for seed in (0, 1):
            x = inputs(1, seed)
            torch.testing.assert_close(compiled(x), fn(x))
        self.assertIn("aten.min.default", [b[0] for b in compiled.graph_breaks()])

    def test_a_session_in_lazy_mode_still_traces_once(self):
        tracecache.configure(mode="lazy", no_cache=True)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
        compiled = tracecache.torch.compile(model)
        for _ in range(3):
            compiled(torch.randn(2, 4))
        self.assertEqual(compiled.stats()["traces"], 1)

    def test_lists_dicts_and_keywords(self):
        def fn(xs, scale=1.0, extra=None):
            return {"sum": xs[0] + xs[1] * scale, "extra": extra["a"] * 2}
        compiled = tracecache.torch.compile(fn)
        a, b, c = torch.ones(2), torch.arange(2.0), torch.full((2,), 3.0)
        got = compiled([a, b], scale=2.0, extra={"a": c})
        want = fn([a, b], scale=2.0, extra={"a": c})
        self.assertEqual(set(got), {"sum", "extra"})
        for key in want:
            torch.testing.assert_close(got[key], want[key])
        got = compiled([a, b], scale=3.0, extra={"a": c})
        torch.testing.assert_close(got["sum"], fn([a, b], scale=3.0, extra={"a": c})["sum"])

    def test_state_names_that_are_not_identifiers(self):
        # RegNet's state_dict names hold '-' ("trunk_output.block1.block1-0.proj.0.weight").
        torch.manual_seed(0)
        model = nn.Sequential()
        model.add_module("block1-0", nn.Linear(3, 3))
        model.add_module("0", nn.ReLU())
        model.eval()
        x = torch.randn(2, 3)
        torch.testing.assert_close(tracecache.torch.compile(model)(x), model(x).detach())

    def test_the_default_name_does_not_depend_on_where_the_script_lives(self):
        compiled = tracecache.torch.compile(branchy())
        self.assertEqual(compiled.name, "__main__:Branchy.forward")
        self.assertEqual(tracecache.torch.compile(inputs).name, "__main__:inputs")
        self.assertEqual(tracecache.compile(inputs).name, "__main__:inputs")
        import torchvision
        self.assertEqual(tracecache.torch.compile(torchvision.models.resnet18()).name,
                         "torchvision.models.resnet:ResNet.forward")


# A second process: a compiled module with a break and a branch, and a training step whose
# model and optimizer state come from the first process (saved with torch.save).
PROCESS = r'''
import json, os, sys
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[2])
import tracecache, tracecache.torch
import test_torch_breaks as t
tracecache.configure(mode="lazy", db=sys.argv[1])
model = t.branchy()
compiled = tracecache.torch.compile(model)
outs = [compiled(t.inputs(sign, k)).tolist() for k, sign in enumerate([1, -1, 1])]
state_file = os.path.join(os.path.dirname(sys.argv[1]), "train.pt")
torch.manual_seed(1)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
if os.path.exists(state_file):
    saved = torch.load(state_file)
    net.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
def step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss
train = tracecache.torch.compile_step(step, net, opt)
g = torch.Generator().manual_seed(5)
x, y = torch.randn(4, 4, generator=g), torch.randint(0, 3, (4,), generator=g)
losses = [train(x, y).item() for _ in range(3)]
torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, state_file)
# No flush: the hit counts are written at exit.
print(json.dumps({"torch": tracecache.torch.stats(), "counters": tracecache.counters(), "outs": outs,
                  "losses": losses, "step": train.stats()}))
'''


class SecondProcess(unittest.TestCase):
    def test_a_warm_process_captures_lowers_and_traces_nothing(self):
        runs, directory = torch_models.run_processes(self, PROCESS, [[], []])
        first, second = runs
        self.assertEqual(first["torch"]["captures"], 3, "two paths of the module and the step")
        self.assertEqual(second["torch"], {"captures": 0, "lowerings": 0})
        self.assertEqual(second["counters"]["traces"], 0)
        self.assertEqual(second["counters"]["compiles"], 0)
        self.assertEqual(first["outs"], second["outs"])
        self.assertEqual(second["step"]["traces"], 0)
        self.assertLess(second["losses"][0], first["losses"][-1], "training went on from the saved state")
        # Both processes' replays are in the audit (written at exit): the CLI reads the same database.
        cli = os.environ.get("TRACECACHE_CLI")
        if cli:
            db = os.path.join(directory, "cache.db")
            p = subprocess.run([cli, "audit", "--db", db, "--json"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            audit = json.loads(p.stdout)
            functions = {f["name"]: f for f in audit["functions"]}
            self.assertIn("test_torch_breaks:Branchy.forward", functions)
            hits = sum(e["hits"] for e in functions["test_torch_breaks:Branchy.forward"]["entries"])
            self.assertEqual(hits, 4, "1 replay in the first process, 3 in the second")
            steps = [f for name, f in functions.items() if name == "__main__:step"]
            self.assertEqual(sum(e["hits"] for f in steps for e in f["entries"]), 5)


INTERRUPTED = r'''
import sys
import torch
import tracecache, tracecache.torch
tracecache.configure(db=sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Linear(4, 4).eval()
compiled = tracecache.torch.compile(model)
x = torch.ones(2, 4)
calls = 0
while True:
    compiled(x)
    calls += 1
    if calls == 6:
        print("ready", flush=True)
'''


class Audit(unittest.TestCase):
    def test_an_interrupted_run_writes_its_counts(self):
        import signal
        directory = tempfile.mkdtemp(dir=os.environ.get("TRACECACHE_TEST_TMP"))
        script = os.path.join(directory, "loop.py")
        with open(script, "w") as f:
            f.write(INTERRUPTED)
        db = os.path.join(directory, "cache.db")
        p = subprocess.Popen([sys.executable, script, db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        self.assertIn("KeyboardInterrupt", err)
        audit = tracecache.audit(db=db)
        (function,) = audit["functions"]
        self.assertGreaterEqual(sum(e["hits"] for e in function["entries"]), 5)

    def test_audit_and_report_count_this_process(self):
        directory = tempfile.mkdtemp(dir=os.environ.get("TRACECACHE_TEST_TMP"))
        db = os.path.join(directory, "cache.db")
        tracecache.configure(db=db)
        torch.manual_seed(0)
        compiled = tracecache.torch.compile(nn.Linear(3, 3).eval())
        for _ in range(6):
            compiled(torch.ones(1, 3))
        (function,) = tracecache.audit()["functions"]
        self.assertEqual(function["name"], "torch.nn.modules.linear:Linear.forward")
        self.assertEqual(sum(e["hits"] for e in function["entries"]), 5)
        page = os.path.join(directory, "report.html")
        self.assertGreater(tracecache.report(page), 0)
        with open(page) as f:
            html = f.read()
        self.assertIn("once-mode replays", html)
        self.assertIn("torch.nn.modules.linear", html, "the graphs name their module")
        tracecache.configure(no_cache=True)


if __name__ == "__main__":
    unittest.main()
