"""QDQ-quantized ONNX models made from PyTorch models, as a user would make them without ONNX
Runtime's quantization tool (not on this machine): every Conv2d and Linear reads its input
through torch.fake_quantize_per_tensor_affine (u8, asymmetric, scale and zero point from the
input's calibrated min and max) and its weight through torch.fake_quantize_per_channel_affine
(i8, symmetric, per output channel). torch.onnx.export writes each fake quantization as a
QuantizeLinear -> DequantizeLinear pair; the weights' QuantizeLinear, whose inputs are all
constant, is then replaced by its i8 result, so a weight is stored as ONNX's QDQ format stores
it: an i8 initializer read through DequantizeLinear (per channel, axis 0).

The PyTorch model that was exported is the oracle: it computes the same quantize-dequantize
steps in f32 (PyTorch rounds half to even, as ONNX does).

Used by tests/python/test_qdq_onnx.py and bench/qdq_speed.py."""
import numpy as np
import onnx
import torch
from onnx import numpy_helper


class FakeQuant(torch.nn.Module):
    """A Conv2d or Linear whose input and weight pass through fake quantization."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        w = layer.weight.detach()
        scale = w.abs().reshape(w.shape[0], -1).amax(dim=1) / 127
        self.register_buffer("w_scale", torch.where(scale > 0, scale, torch.ones_like(scale)))
        self.register_buffer("w_zero", torch.zeros(w.shape[0], dtype=torch.int32))
        self.x_scale, self.x_zero = 1.0, 0
        self.lo, self.hi = 0.0, 0.0  # the calibrated input range
        self.calibrating = True

    def fix(self):
        """Scale and zero point from the calibrated range, which always contains 0."""
        self.x_scale = max((self.hi - self.lo) / 255, 1e-8)
        self.x_zero = int(min(255, max(0, round(-self.lo / self.x_scale))))

    def forward(self, x):
        if self.calibrating:  # f32, recording the input's range
            self.lo = min(self.lo, float(x.min()))
            self.hi = max(self.hi, float(x.max()))
            return self.layer(x)
        x = torch.fake_quantize_per_tensor_affine(x, self.x_scale, self.x_zero, 0, 255)
        w = torch.fake_quantize_per_channel_affine(self.layer.weight, self.w_scale, self.w_zero, 0, -128, 127)
        if isinstance(self.layer, torch.nn.Linear):
            return torch.nn.functional.linear(x, w, self.layer.bias)
        c = self.layer
        return torch.nn.functional.conv2d(x, w, c.bias, c.stride, c.padding, c.dilation, c.groups)


def quantize(model, calibration):
    """`model` (eval mode) with every Conv2d and Linear wrapped in FakeQuant, calibrated on the
    batches of `calibration`."""
    wrapped = []

    def wrap(parent):
        for name, child in parent.named_children():
            if isinstance(child, (torch.nn.Conv2d, torch.nn.Linear)):
                fq = FakeQuant(child)
                setattr(parent, name, fq)
                wrapped.append(fq)
            else:
                wrap(child)

    wrap(model)
    with torch.no_grad():
        for x in calibration:
            model(x)
    for fq in wrapped:
        fq.calibrating = False
        fq.fix()
    return model


def export_qdq(model, example, path, opset=13):
    """Exports the fake-quantized `model` to `path` in QDQ form (see the module comment). Returns
    the number of QuantizeLinear and DequantizeLinear nodes."""
    with torch.no_grad():
        torch.onnx.export(model, example, path, opset_version=opset, input_names=["x"], output_names=["y"],
                          do_constant_folding=True)
    m = onnx.load(path)
    g = m.graph
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    keep, added = [], []
    for n in g.node:
        if n.op_type == "QuantizeLinear" and all(i in consts for i in n.input) and consts[n.input[0]].ndim > 1:
            x, scale, zero = (consts[i] for i in n.input)
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
            shape = [1] * x.ndim
            if scale.ndim == 1:
                shape[axis] = -1
            q = np.rint(x / scale.reshape(shape)) + zero.reshape(shape).astype(np.float32)
            info = np.iinfo(zero.dtype)
            q = np.clip(q, info.min, info.max).astype(zero.dtype)
            added.append(numpy_helper.from_array(q, n.output[0]))
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(added)
    # Drop the float weights nothing reads now.
    used = {i for n in g.node for i in n.input}
    live = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(live)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in g.node)
