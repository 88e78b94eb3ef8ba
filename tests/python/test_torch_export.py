"""`python3 -m tracecache.torch export`: a PyTorch module written as a trace program plus
.safetensors weights, run by `tracecache run`, gives PyTorch's eager outputs (1e-4 relative);
its errors exit 2 naming what is wrong; docs/python.md's op table is the mapping's own.

Run by ctest as python.test_torch_export (tests/python/run_test.sh: TRACECACHE_CLI names the
tracecache command, the working directory is a fresh temporary one)."""

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import torch_models

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLI = os.environ.get("TRACECACHE_CLI", os.path.join(REPO, "build", "cli", "tracecache"))


def export(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tracecache.torch", "export", *args], cwd=cwd,
                          capture_output=True, text=True)


def run_trace(path, out_dir):
    p = subprocess.run([CLI, "run", path, "--no-cache", "--save-outputs", out_dir], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


class ExportRoundTrip(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TRACECACHE_TEST_TMP"))

    def test_resnet18_matches_eager(self):
        x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
        np.save(os.path.join(self.dir, "image.npy"), x.numpy())
        p = export("torchvision.models:resnet18", "--input", "image=image.npy", "-o", "r18.trace", cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.dir, "r18.trace")) as f:
            trace = f.read()
        # Weights are parameters by state_dict name, never constants.
        self.assertIn('param layer1_0_conv1_weight : f32[64, 64, 3, 3] = '
                      'safetensors("r18.safetensors", "layer1.0.conv1.weight")', trace)
        self.assertIn('input image : f32[1, 3, 32, 32] = npy("image.npy")', trace)
        run_trace(os.path.join(self.dir, "r18.trace"), os.path.join(self.dir, "out"))
        got = np.load(os.path.join(self.dir, "out", "step0_out0.npy"))
        want, = torch_models.eager(torch_models.zoo_model("resnet18"), x)
        self.assertLessEqual(torch_models.relative_error(got, want), 1e-4)
        self.assertEqual(int(got.argmax()), int(want.argmax()))

    def test_weights_file_holds_the_state_dict_by_name(self):
        p = export("torchvision.models:squeezenet1_1", "--input", "x=f32[1,3,32,32]", "-o", "sq.trace",
                   cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.dir, "sq.safetensors"), "rb") as f:
            n, = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        state = torch_models.zoo_model("squeezenet1_1").state_dict()
        self.assertEqual(set(header), set(state))
        for name, t in state.items():
            self.assertEqual(header[name]["shape"], list(t.shape), name)
        # A generated input runs too (values from the program's generator).
        run_trace(os.path.join(self.dir, "sq.trace"), os.path.join(self.dir, "out"))
        self.assertEqual(np.load(os.path.join(self.dir, "out", "step0_out0.npy")).shape, (1, 1000))

    def test_bert_style_module_matches_eager(self):
        inputs = torch_models.bert_inputs()
        for name, t in zip(("ids", "types", "mask"), inputs):
            np.save(os.path.join(self.dir, f"{name}.npy"), t.numpy())
        p = export(os.path.join(HERE, "torch_models.py") + ":bert", "--input", "ids=ids.npy",
                   "--input", "types=types.npy", "--input", "mask=mask.npy", "-o", "bert.trace", cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        run_trace(os.path.join(self.dir, "bert.trace"), os.path.join(self.dir, "out"))
        want = torch_models.eager(torch_models.bert(), *inputs)
        for k, w in enumerate(want):
            got = np.load(os.path.join(self.dir, "out", f"step0_out{k}.npy"))
            self.assertLessEqual(torch_models.relative_error(got, w), 1e-4, f"output {k}")


UNMAPPED = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return torch.cumsum(y, dim=1)  # the unmapped op
'''


class ExportErrors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TRACECACHE_TEST_TMP"))

    def test_help(self):
        p = export("--help", cwd=self.dir)
        self.assertEqual(p.returncode, 0)
        self.assertIn("MODULE:FACTORY", p.stdout)

    def test_unmapped_op_names_itself_and_the_user_line(self):
        path = os.path.join(self.dir, "unmapped.py")
        with open(path, "w") as f:
            f.write(UNMAPPED)
        p = export(path + ":Model", "--input", "x=f32[2,3]", "-o", "m.trace", cwd=self.dir)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no mapping for ATen op aten.cumsum.default", p.stderr)
        self.assertIn(f"{path}:6 in forward: return torch.cumsum(y, dim=1)", p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "m.trace")))

    def test_usage_errors_exit_2(self):
        cases = [
            (["torchvision.models:resnet18", "-o", "m.trace"], "at least one --input"),
            (["torchvision.models:resnet18", "--input", "x=f64[1,3,32,32]", "-o", "m.trace"], "is not DTYPE[DIMS]"),
            (["torchvision.models:resnet18", "--input", "x", "-o", "m.trace"], "is not NAME=SPEC"),
            (["torchvision.models:resnet1", "--input", "x=f32[1,3,32,32]", "-o", "m.trace"], "has no 'resnet1'"),
            (["no_such_module:f", "--input", "x=f32[1]", "-o", "m.trace"], "cannot import 'no_such_module'"),
            (["resnet18", "--input", "x=f32[1]", "-o", "m.trace"], "is not MODULE:FACTORY"),
            (["torchvision.models:resnet18", "--input", "x=missing.npy", "-o", "m.trace"], "no such file"),
            (["torchvision.models:resnet18", "--input", "input=f32[1,3,32,32]", "-o", "m.trace"],
             "input name 'input' is not a trace identifier"),
        ]
        from tracecache.torch.__main__ import main
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            for args, message in cases:
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    status = main(["export", *args])
                self.assertEqual(status, 2, (args, err.getvalue()))
                self.assertIn(message, err.getvalue(), args)
        finally:
            os.chdir(cwd)


class OpTable(unittest.TestCase):
    def test_docs_table_is_the_mapping(self):
        from tracecache.torch import docs
        with open(os.path.join(REPO, "docs", "python.md")) as f:
            text = f.read()
        begin, end = text.index(docs.BEGIN) + len(docs.BEGIN), text.index(docs.END)
        self.assertEqual(text[begin:end].strip("\n"), docs.markdown_table().strip("\n"),
                         "docs/python.md's op table is stale: paste `python3 -m tracecache.torch ops --markdown`")


if __name__ == "__main__":
    unittest.main()
