# ONNX models (docs/onnx.md): a PyTorch model exported with torch.onnx.export runs with
# `tracecache run MODEL.onnx` and gives PyTorch's outputs in lazy and once mode, on cpu and sim;
# `import` writes a program and weights that `run` gives the same outputs for; the model's
# state_dict names survive as the params' safetensors names; bad models are exit code 2 with the
# node named.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cd "$TMP"
"$PY" - <<'PY'
import numpy as np, torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)
    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        y = y.reshape(y.shape[0], -1)          # Shape -> Gather -> Concat -> Reshape
        return torch.nn.functional.gelu(self.fc(y)).softmax(-1)
net = Net().eval()
with torch.no_grad():
    net.bn.running_mean.uniform_(-0.5, 0.5); net.bn.running_var.uniform_(0.5, 2.0)
    for b in (2, 3):
        x = torch.randn(b, 3, 14, 14)
        np.save(f"x{b}.npy", x.numpy())
        np.save(f"torch{b}.npy", net(x).numpy())
    torch.onnx.export(net, torch.randn(2, 3, 14, 14), "net.onnx", opset_version=13, input_names=["x"],
                      output_names=["probs"], dynamic_axes={"x": {0: "batch"}, "probs": {0: "batch"}},
                      do_constant_folding=False)
    torch.onnx.export(net, torch.randn(2, 3, 14, 14), "net17.onnx", opset_version=17, input_names=["x"],
                      output_names=["probs"])
PY
close() {  # close ACTUAL.npy EXPECTED.npy: within 1e-4 relative (and 1e-6 absolute)
  "$PY" -c "
import numpy as np, sys
a, e = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == e.shape, (a.shape, e.shape)
assert np.allclose(a, e, rtol=1e-4, atol=1e-6), np.abs(a - e).max()" "$1" "$2" || fail "$1 differs from $2"
}
for mode in lazy once; do
  for backend in cpu sim:h100; do
    for b in 2 3; do
      rm -rf so
      expect_exit 0 "$TC" run net.onnx --input x=x$b.npy --mode $mode --backend $backend --db "$TMP/c.db" \
        --save-outputs so -q
      close so/step0_probs.npy torch$b.npy
    done
  done
done
# Opset 17, static shapes: no --input needed to run (generated input), and with one it matches.
rm -rf so
expect_exit 0 "$TC" run net17.onnx --input x=x2.npy --no-cache --save-outputs so -q
close so/step0_probs.npy torch2.npy
# A symbolic batch with no size given: the error says how to give it.
expect_exit 2 "$TC" run net.onnx --no-cache
grep -q "symbolic dim 0 ('batch')" "$TMP/err" || fail "no symbolic-dim message: $(cat "$TMP/err")"
grep -q -- "--shape x=f32" "$TMP/err" || fail "the message does not say how to pass the shape"
# import: a program + weights by state_dict name; running it gives the same outputs.
mkdir -p imp
expect_exit 0 "$TC" import net.onnx -o imp/net.trace --input x=x3.npy --json
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['inputs'][0]['shape']==[3,3,14,14], d" "$TMP/out"
# (PyTorch's eval-mode export folds the batch norm into the conv, whose weights it then names
# onnx::Conv_N; the linear layer keeps its state_dict names.)
grep -q 'safetensors("net.safetensors", "fc.weight")' imp/net.trace || fail "fc.weight is not a param by its name"
grep -q 'safetensors("net.safetensors", "fc.bias")' imp/net.trace || fail "fc.bias is not a param by its name"
if grep -Eq '= (shape|gather)\(' imp/net.trace; then fail "the shape sub-graph was not folded"; fi
rm -rf so
expect_exit 0 "$TC" run imp/net.trace --no-cache --save-outputs so -q
close so/step0_probs.npy torch3.npy
expect_exit 0 "$TC" import net.onnx -o imp/net2.trace --shape "x=f32[4, 3, 14, 14]"
grep -q 'input x : f32\[4, 3, 14, 14\]' imp/net2.trace || fail "--shape did not set the input's type"
expect_exit 2 "$TC" import net.onnx -o imp/bad.trace --shape "x=f32[4, 3, 15, 14]"
grep -q "dim 2 of size 14" "$TMP/err" || fail "a contradicting --shape was not refused: $(cat "$TMP/err")"
expect_exit 2 "$TC" import net.onnx -o no/such/dir/net.trace --shape "x=f32[1, 3, 14, 14]"
grep -q "directory .* does not exist" "$TMP/err" || fail "a missing output directory: $(cat "$TMP/err")"
# The op table.
expect_exit 0 "$TC" import --list-ops
grep -q "^Conv " "$TMP/out" || fail "--list-ops lacks Conv"
# An unsupported op names the node (name, index, op type); exit code 2.
"$PY" - <<'PY'
import onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="first"),
                       helper.make_node("Unique", ["r"], ["y"], name="my_unique", sorted=1)], "g", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "unique.onnx")
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]), "opset12.onnx")
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), "opset18.onnx")
PY
expect_exit 2 "$TC" run unique.onnx --no-cache
grep -q "node 'my_unique' (#1, Unique): op Unique is not supported" "$TMP/err" || fail "unsupported op message: $(cat "$TMP/err")"
# An older opset is converted on import (ONNX's version converter); a newer one is refused.
"$TC" import opset12.onnx -o imp/o12.trace > /dev/null 2> "$TMP/err" || fail "opset 12 import: $(cat "$TMP/err")"
head -1 imp/o12.trace | grep -q "ONNX opset 13, converted from opset 12" || fail "opset 12 header: $(head -1 imp/o12.trace)"
expect_exit 2 "$TC" import opset18.onnx -o imp/o18.trace
grep -q "opset 18 is not supported" "$TMP/err" || fail "opset 18 message: $(cat "$TMP/err")"
head -c 100 net.onnx > truncated.onnx
expect_exit 2 "$TC" run truncated.onnx --no-cache
grep -q "not an ONNX model" "$TMP/err" || fail "truncated model message: $(cat "$TMP/err")"
expect_exit 2 "$TC" run net.onnx --input y=x2.npy --no-cache
grep -q "the model has no input 'y'" "$TMP/err" || fail "unknown input message: $(cat "$TMP/err")"
echo ok
