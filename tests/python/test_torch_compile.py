"""tracecache.torch.compile in once mode: guards (a new batch size and a new dtype recompile,
with reasons naming the input), a second process with the same database does zero captures and
zero compiles, parameter updates between calls are seen, an unmapped op names itself and the
user's line.

Run by ctest as python.test_torch_compile (tests/python/run_test.sh: TRACECACHE_DB points into
a fresh temporary directory)."""

import unittest

import torch
from torch import nn

import torch_models
import tracecache
import tracecache.torch



class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def scaled(x, y):
    return x * 2 + y


class Guards(unittest.TestCase):
    def setUp(self):
        tracecache.configure(mode="once", no_cache=True)

    def test_same_types_replay_without_capturing(self):
        torch.manual_seed(0)
        model = Mlp().eval()
        compiled = tracecache.torch.compile(model)
        x = torch.randn(3, 8)
        before = tracecache.torch.stats()["captures"]
        for _ in range(3):
            torch.testing.assert_close(compiled(x), torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        self.assertEqual(tracecache.torch.stats()["captures"] - before, 1)
        self.assertEqual(compiled.stats()["traces"], 1)

    def test_new_batch_size_recompiles_naming_the_input_and_dim(self):
        torch.manual_seed(0)
        model = Mlp().eval()
        compiled = tracecache.torch.compile(model)
        compiled(torch.randn(3, 8))
        x = torch.randn(5, 8)
        torch.testing.assert_close(compiled(x), torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        reasons = compiled.recompile_reasons()
        self.assertEqual(len(reasons), 1, reasons)
        # The state comes first (fc1.weight, fc1.bias, fc2.weight, fc2.bias): x is argument 4.
        self.assertIn("input 4", reasons[0])
        self.assertIn("dim 0 expected 3, actual 5", reasons[0])

    def test_new_dtype_recompiles(self):
        compiled = tracecache.torch.compile(scaled)
        a, b = torch.arange(6, dtype=torch.int32), torch.arange(6, dtype=torch.int32)
        self.assertTrue(torch.equal(compiled(a, b), a * 2 + b))
        af, bf = a.float(), b.float()
        self.assertTrue(torch.equal(compiled(af, bf), af * 2 + bf))
        reasons = compiled.recompile_reasons()
        self.assertEqual(len(reasons), 1, reasons)
        self.assertIn("input 0", reasons[0])
        self.assertIn("dtype", reasons[0])

    def test_parameter_updates_are_seen(self):
        torch.manual_seed(0)
        model = Mlp().eval()
        compiled = tracecache.torch.compile(model)
        x = torch.randn(3, 8)
        compiled(x)
        with torch.no_grad():
            model.fc1.weight.mul_(-0.5)           # in place
        torch.testing.assert_close(compiled(x), torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        model.fc2.bias = nn.Parameter(torch.full((4,), 3.0))   # a new tensor
        torch.testing.assert_close(compiled(x), torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        model.fc2.weight.data.copy_(torch.randn(4, 16))        # through .data
        torch.testing.assert_close(compiled(x), torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        self.assertEqual(compiled.stats()["traces"], 1)

    def test_train_and_eval_are_different_graphs(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0), nn.ReLU()).eval()
        compiled = tracecache.torch.compile(model)
        x = torch.randn(2, 4)
        compiled(x)
        version = compiled.version
        model.train()
        with self.assertWarnsRegex(UserWarning, "carry no autograd history"):
            got = compiled(x)
        torch.testing.assert_close(got, torch_models.eager(model, x)[0], rtol=1e-5, atol=1e-6)
        self.assertNotEqual(compiled.version, version)

    def test_frozen_parameters_keep_the_composite_attention(self):
        # requires_grad_(False) and no_grad would let PyTorch take _native_multi_head_attention and
        # nested tensors; the capture still sees the composite path.
        model = torch_models.bert()
        inputs = torch_models.bert_inputs()
        want = torch_models.eager(model, *inputs)
        for p in model.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            got = tracecache.torch.compile(model)(*inputs)
        for k, (g, w) in enumerate(zip(got, want)):
            self.assertLessEqual(torch_models.relative_error(g, w), 1e-4, f"output {k}")

    def test_output_structure_is_kept(self):
        def fn(x):
            return {"double": x * 2, "pair": (x + 1, x.sum())}
        out = tracecache.torch.compile(fn)(torch.ones(3))
        self.assertIs(type(out), dict)  # not torch.fx's immutable_dict
        self.assertEqual(set(out), {"double", "pair"})
        self.assertTrue(torch.equal(out["pair"][0], torch.full((3,), 2.0)))
        self.assertEqual(out["pair"][1].item(), 3.0)


class FastPath(unittest.TestCase):
    """The C++ per-call path of a compiled module (after its first replayable call): the same
    results as the Python path whatever the call, and it hands back to it when it must."""

    def setUp(self):
        tracecache.configure(mode="once", no_cache=True)
        torch.manual_seed(0)
        self.model = Mlp().eval()
        self.compiled = tracecache.torch.compile(self.model)
        self.x = torch.randn(3, 8)
        self.compiled(self.x)

    def check(self, x):
        torch.testing.assert_close(self.compiled(x), torch_models.eager(self.model, x)[0], rtol=1e-5, atol=1e-6)

    def test_it_serves_replays_and_counts_them(self):
        self.assertIsNotNone(self.compiled._fast)
        for _ in range(3):
            self.check(self.x)
        self.assertEqual(self.compiled.stats()["hits_per_entry"], [3])
        self.assertEqual(self.compiled.stats()["calls"], 4)
        # The first C++ replay checked the module's state; the engine's memo vouched for it after.
        self.assertEqual(self.compiled.stats()["memoized_replays"], 2)

    def test_outputs_are_the_callers(self):
        a = self.compiled(self.x)
        a.add_(100)  # writable, and nothing of tracecache's sees it
        self.check(self.x)

    def test_inputs_it_cannot_view_go_the_python_way(self):
        self.check(torch.randn(8, 3).t())  # not contiguous
        self.check(torch.randn(3, 8, requires_grad=True))
        self.check(torch.randn(5, 8))  # a new size: a trace
        self.assertEqual(self.compiled.stats()["traces"], 2)

    def test_modes_and_sessions_change_under_it(self):
        self.model.train()
        self.check(self.x)
        self.model.eval()
        self.check(self.x)
        tracecache.configure(mode="once", no_cache=True)
        self.check(self.x)


    # What the C++ path reads instead of asking Python per parameter (docs/python.md, "The
    # per-call path"): each change below must reach the next call, served by the C++ path itself.
    def served_fast(self, x):
        out = self.compiled._fast.call(x)
        self.assertIsNotNone(out, "the C++ path handed the call back")
        torch.testing.assert_close(out, torch_models.eager(self.model, x)[0], rtol=1e-5, atol=1e-6)

    def test_the_torch_bridge_is_built(self):
        from tracecache.torch import compiled
        self.assertIsNotNone(compiled._torch_bridge(), "tracecache.torch runs without its C++ per-call path")

    def test_in_place_writes_reach_the_next_call(self):
        self.served_fast(self.x)
        with torch.no_grad():
            self.model.fc1.weight.mul_(-1.5)  # the version counter moves
        self.served_fast(self.x)
        self.model.load_state_dict({k: v * 0.5 for k, v in self.model.state_dict().items()})
        self.served_fast(self.x)

    def test_replaced_and_reassigned_parameters_reach_the_next_call(self):
        self.served_fast(self.x)
        self.model.fc2.weight = nn.Parameter(torch.randn(4, 16))  # another object in _parameters
        self.served_fast(self.x)
        self.model.fc2.bias.data = torch.randn(4)  # the same object over other storage, same version
        self.served_fast(self.x)
        self.model.fc1._parameters = dict(self.model.fc1._parameters)  # another dictionary
        self.model.fc1.bias = nn.Parameter(torch.randn(16))
        self.served_fast(self.x)
        self.served_fast(torch.randn(3, 8))
        self.assertGreater(self.compiled.stats()["memoized_replays"], 0)

    def test_the_python_path_sees_reassigned_data_too(self):
        compiled = tracecache.torch.compile(self.model, mode="lazy")
        torch.testing.assert_close(compiled(self.x), torch_models.eager(self.model, self.x)[0], rtol=1e-5, atol=1e-6)
        self.model.fc2.bias.data = torch.randn(4)
        torch.testing.assert_close(compiled(self.x), torch_models.eager(self.model, self.x)[0], rtol=1e-5, atol=1e-6)

    def test_a_removed_parameter_hands_the_call_back(self):
        del self.model.fc2.bias
        self.model.fc2.register_parameter("bias", None)
        self.assertIsNone(self.compiled._fast.call(self.x))

    def test_a_changed_flag_hands_the_call_back(self):
        self.model.fc1.train()
        self.assertIsNone(self.compiled._fast.call(self.x))
        self.model.fc1.eval()
        self.served_fast(self.x)

    def test_each_call_takes_the_next_seed(self):
        tracecache.manual_seed(7)
        for _ in range(3):
            self.served_fast(self.x)
        self.assertEqual(tracecache.next_seed().tolist(), [7, 3])
        self.assertEqual(tracecache.next_seed().tolist(), [7, 4])

    def test_a_structured_output_and_its_breaks(self):
        def fn(x):
            return {"double": x * 2, "pair": (x + 1, x.sum())}
        compiled = tracecache.torch.compile(fn)
        x = torch.ones(3)
        for _ in range(3):
            out = compiled(x)
            self.assertIs(type(out), dict)
            self.assertTrue(torch.equal(out["pair"][0], torch.full((3,), 2.0)))
            self.assertEqual(out["pair"][1].item(), 3.0)
        self.assertIsNotNone(compiled._fast)
        self.assertEqual(compiled.graph_breaks(), [])


UNMAPPED_LINE = "return torch.cumsum(x, dim=0)"


def uses_cumsum(x):
    return torch.cumsum(x, dim=0)


class StructureNotes(unittest.TestCase):
    """The output structure stored as a guard entry's note is untrusted: what does not decode or
    does not fit gives None (the call then captures once more), never a wrong structure."""

    def test_round_trip(self):
        from torch.utils import _pytree as pytree
        from tracecache.torch import compiled
        leaves, spec = pytree.tree_flatten({"a": (1, 2), "b": [3]})
        note = compiled._structure_note(spec, [None, 2.5, None])
        back_spec, constants = compiled._structure_from_note(note)
        self.assertEqual(pytree.tree_unflatten([0, 2.5, 1], back_spec), {"a": (0, 2.5), "b": [1]})
        self.assertEqual(constants, [None, 2.5, None])

    def test_bad_notes_are_refused(self):
        from tracecache.torch import compiled
        for note in [b"", b"\xff\xfe", b"[]", b"{}", b'{"spec": {"t": "leaf"}}',
                     b'{"spec": {"t": "leaf"}, "constants": []}',
                     b'{"spec": {"t": "leaf"}, "constants": [null, null]}',
                     b'{"spec": {"t": "leaf"}, "constants": ["text"]}',
                     b'{"spec": {"t": "tuple", "c": 5}, "constants": [null]}',
                     b'{"spec": {"t": "dict", "c": [{"t": "leaf"}]}, "constants": [null]}',
                     b"[" * 100000]:
            self.assertIsNone(compiled._structure_from_note(note), note[:60])


class Errors(unittest.TestCase):
    def test_unmapped_op_names_itself_and_the_user_line_with_fullgraph(self):
        for mode in ("lazy", "once"):
            tracecache.configure(no_cache=True)
            with self.assertRaises(tracecache.torch.UnsupportedOpError) as caught:
                tracecache.torch.compile(uses_cumsum, fullgraph=True, mode=mode)(torch.ones(4))
            message = str(caught.exception)
            self.assertIn("aten.cumsum.default", message)
            self.assertIn(f"{__file__}:", message)
            self.assertIn(UNMAPPED_LINE, message)

    def test_a_parameter_read_from_outside_points_to_compile_step(self):
        tracecache.configure(mode="once", no_cache=True)
        model = Mlp()

        def predict(x):
            return model(x)
        with self.assertRaises(tracecache.torch.CaptureError) as caught:
            tracecache.torch.compile(predict)(torch.ones(2, 8))
        self.assertIn("reads a parameter", str(caught.exception))
        self.assertIn("compile_step", str(caught.exception))

    def test_arguments_are_tensors_and_plain_values(self):
        tracecache.configure(no_cache=True)
        compiled = tracecache.torch.compile(scaled)
        self.assertTrue(torch.equal(compiled(torch.ones(2), 3), torch.full((2,), 5.0)))
        self.assertTrue(torch.equal(compiled(torch.ones(2), 4), torch.full((2,), 6.0)), "a new number: a new graph")
        with self.assertRaises(TypeError):
            compiled(torch.ones(2), object())
        with self.assertRaisesRegex(TypeError, r"float64.*convert it first \(\.float\(\)\)"):
            tracecache.torch.compile(scaled)(torch.ones(2, dtype=torch.float64), torch.ones(2))


PROCESS = r'''
import json, sys
import torch
import tracecache, tracecache.torch
sys.path.insert(0, sys.argv[2])
import torch_models
tracecache.configure(mode="once", db=sys.argv[1])
model = torch_models.zoo_model("resnet18")
bert = torch_models.bert()
x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(5))
out = tracecache.torch.compile(model)(x)
h, pooled = tracecache.torch.compile(bert)(*torch_models.bert_inputs())
def structured(v):
    return {"double": v * 2, "pair": (v + 1, v.sum()), "n": 3}
s = tracecache.torch.compile(structured)(torch.ones(3))
want = torch_models.eager(model, x)[0]
print(json.dumps({"torch": tracecache.torch.stats(), "counters": tracecache.counters(),
                  "structure": [sorted(s), type(s["pair"]).__name__, len(s["pair"]), s["n"],
                                s["pair"][1].item()],
                  "error": torch_models.relative_error(out, want), "checksum": float(out.double().sum()),
                  "pooled": float(pooled.double().sum())}))
'''


class SecondProcess(unittest.TestCase):
    def test_zero_captures_and_zero_compiles(self):
        runs, directory = torch_models.run_processes(self, PROCESS, [[], []])
        first, second = runs
        self.assertEqual(first["torch"]["captures"], 3)
        # The output structure came back from the stored entry's note, not from a capture.
        self.assertEqual(second["structure"], [["double", "n", "pair"], "tuple", 2, 3, 3.0])
        self.assertEqual(first["structure"], second["structure"])
        self.assertGreater(first["counters"]["compiles"], 0)
        self.assertEqual(second["torch"]["captures"], 0)
        self.assertEqual(second["torch"]["lowerings"], 0)
        self.assertEqual(second["counters"]["compiles"], 0)
        self.assertEqual(second["counters"]["traces"], 0)
        self.assertLessEqual(second["error"], 1e-4)
        self.assertEqual(first["checksum"], second["checksum"])
        self.assertEqual(first["pooled"], second["pooled"])


if __name__ == "__main__":
    unittest.main()
