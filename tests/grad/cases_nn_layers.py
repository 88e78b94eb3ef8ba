# Gradient cases of the nn layers (capture/ops/grad_nn_layers.h) for the PyTorch harness of
# tests/grad/: each case is a program in .trace syntax over the named inputs (the last assigned
# name is the result) and the same computation in torch; every floating input is
# differentiated. Inputs are small (CI runs on 2 cores). Pools get "ties" inputs (values from
# {-1, 0, 1, 2}) so PyTorch's tie rule (the first maximum in row-major scan order) is checked.
import torch
import torch.nn.functional as F


def f32(*shape, gen="normal"):
    return ("f32", list(shape), gen)


def _conv(name, x, w, b, torch_kw, trace_kw):
    inputs = {"x": f32(*x), "w": f32(*w)}
    if b:
        inputs["b"] = f32(w[0])
    args = "x, w, b" if b else "x, w"
    attrs = "".join(f", {k}={v}" for k, v in trace_kw.items())
    if b:
        fn = lambda x, w, b: F.conv2d(x, w, b, **torch_kw)
    else:
        fn = lambda x, w: F.conv2d(x, w, None, **torch_kw)
    return {"name": name, "inputs": inputs, "program": f"y = conv2d({args}{attrs})", "torch": fn}


def _pool(name, op, shape, torch_kw, trace_kw, gen="ties"):
    attrs = ", ".join(f"{k}={v}" for k, v in trace_kw.items())
    torch_fn = getattr(F, op)
    return {"name": name, "inputs": {"x": f32(*shape, gen=gen)}, "program": f"y = {op}(x, {attrs})",
            "torch": lambda x: torch_fn(x, **torch_kw)}


CASES = [
    # conv2d
    _conv("conv2d_plain", [2, 3, 6, 6], [4, 3, 3, 3], True, {}, {}),
    _conv("conv2d_stride2_pad1_groups2", [2, 4, 7, 7], [6, 2, 3, 3], True,
          {"stride": 2, "padding": 1, "groups": 2}, {"stride": "[2]", "padding": "[1]", "groups": 2}),
    _conv("conv2d_dilation2_asym_no_bias", [1, 3, 8, 9], [4, 3, 3, 2], False,
          {"stride": (1, 2), "padding": (2, 1), "dilation": 2},
          {"stride": "[1, 2]", "padding": "[2, 1]", "dilation": "[2]"}),
    _conv("conv2d_depthwise", [2, 4, 6, 6], [4, 1, 3, 3], True,
          {"padding": 1, "groups": 4}, {"padding": "[1]", "groups": 4}),
    _conv("conv2d_depthwise_multiplier2_stride2", [2, 3, 7, 6], [6, 1, 3, 3], False,
          {"stride": 2, "padding": 1, "groups": 3}, {"stride": "[2]", "padding": "[1]", "groups": 3}),
    _conv("conv2d_1x1", [2, 3, 5, 5], [4, 3, 1, 1], True, {}, {}),
    _conv("conv2d_stride3_skips_rows", [1, 2, 11, 5], [3, 2, 2, 2], True,
          {"stride": 3}, {"stride": "[3]"}),
    # max_pool2d: ties, padding, dilation, ceil_mode
    _pool("max_pool2d_ties", "max_pool2d", [2, 3, 6, 6], {"kernel_size": 2}, {"kernel": "[2]"}),
    _pool("max_pool2d_overlap_ties", "max_pool2d", [1, 2, 6, 7], {"kernel_size": 3, "stride": 1},
          {"kernel": "[3]", "stride": "[1]"}),
    _pool("max_pool2d_pad_ceil_ties", "max_pool2d", [1, 2, 7, 7],
          {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
          {"kernel": "[3]", "stride": "[2]", "padding": "[1]", "ceil_mode": "true"}),
    _pool("max_pool2d_dilation_ties", "max_pool2d", [2, 1, 9, 8],
          {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1, "dilation": 2, "ceil_mode": True},
          {"kernel": "[2, 3]", "stride": "[1, 2]", "padding": "[1]", "dilation": "[2]", "ceil_mode": "true"}),
    _pool("max_pool2d_normal", "max_pool2d", [2, 2, 5, 5], {"kernel_size": 3, "stride": 2, "padding": 1},
          {"kernel": "[3]", "stride": "[2]", "padding": "[1]"}, gen="normal"),
    # avg_pool2d: padding, ceil_mode, count_include_pad
    _pool("avg_pool2d_plain", "avg_pool2d", [2, 3, 6, 6], {"kernel_size": 2}, {"kernel": "[2]"}, gen="normal"),
    _pool("avg_pool2d_pad_include", "avg_pool2d", [1, 2, 7, 8], {"kernel_size": (3, 2), "stride": (2, 1), "padding": 1},
          {"kernel": "[3, 2]", "stride": "[2, 1]", "padding": "[1]"}, gen="normal"),
    _pool("avg_pool2d_pad_exclude_ceil", "avg_pool2d", [1, 2, 7, 8],
          {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
          {"kernel": "[3]", "stride": "[2]", "padding": "[1]", "ceil_mode": "true", "count_include_pad": "false"},
          gen="normal"),
    _pool("avg_pool2d_pad_include_ceil", "avg_pool2d", [2, 1, 6, 6],
          {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True},
          {"kernel": "[4]", "stride": "[3]", "padding": "[2]", "ceil_mode": "true"}, gen="normal"),
    # adaptive_avg_pool2d: non-divisible sizes, upsampling
    _pool("adaptive_avg_pool2d_nondivisible", "adaptive_avg_pool2d", [2, 3, 5, 7], {"output_size": (3, 2)},
          {"output_size": "[3, 2]"}, gen="normal"),
    _pool("adaptive_avg_pool2d_larger", "adaptive_avg_pool2d", [1, 2, 3, 4], {"output_size": (5, 6)},
          {"output_size": "[5, 6]"}, gen="normal"),
    _pool("adaptive_avg_pool2d_global", "adaptive_avg_pool2d", [2, 4, 3, 5], {"output_size": 1},
          {"output_size": "[1]"}, gen="normal"),
    # linear
    {"name": "linear_bias", "inputs": {"x": f32(4, 5), "w": f32(3, 5), "b": f32(3)},
     "program": "y = linear(x, w, b)", "torch": lambda x, w, b: F.linear(x, w, b)},
    {"name": "linear_no_bias", "inputs": {"x": f32(4, 5), "w": f32(3, 5)},
     "program": "y = linear(x, w)", "torch": lambda x, w: F.linear(x, w)},
    {"name": "linear_3d_bias", "inputs": {"x": f32(2, 3, 4), "w": f32(5, 4), "b": f32(5)},
     "program": "y = linear(x, w, b)", "torch": lambda x, w, b: F.linear(x, w, b)},
    {"name": "linear_1d_no_bias", "inputs": {"x": f32(4), "w": f32(3, 4)},
     "program": "y = linear(x, w)", "torch": lambda x, w: F.linear(x, w)},
    # flatten (squared so the gradient depends on x)
    {"name": "flatten_middle", "inputs": {"x": f32(2, 3, 4, 2)},
     "program": "f = flatten(x, start_dim=1, end_dim=2)\ny = mul(f, f)",
     "torch": lambda x: torch.flatten(x, 1, 2) ** 2},
    {"name": "flatten_all", "inputs": {"x": f32(2, 3, 4)},
     "program": "f = flatten(x)\ny = mul(f, f)", "torch": lambda x: torch.flatten(x) ** 2},
    # pad: zero and non-zero value, crops
    {"name": "pad_zero", "inputs": {"x": f32(2, 3, 4)},
     "program": "p = pad(x, pads=[1, 2])\ny = mul(p, p)", "torch": lambda x: F.pad(x, (1, 2)) ** 2},
    {"name": "pad_value_crop", "inputs": {"x": f32(2, 3, 4)},
     "program": "p = pad(x, pads=[1, 2, -1, 1], value=0.5)\ny = mul(p, p)",
     "torch": lambda x: F.pad(x, (1, 2, -1, 1), value=0.5) ** 2},
    {"name": "pad_all_dims", "inputs": {"x": f32(2, 2, 3)},
     "program": "p = pad(x, pads=[0, 1, 2, 0, 1, 1], value=-1)\ny = mul(p, p)",
     "torch": lambda x: F.pad(x, (0, 1, 2, 0, 1, 1), value=-1.0) ** 2},
    # batch_norm (eval form: normalization with the given mean and var), gradients for all five
    # inputs; torch's F.batch_norm does not differentiate its running statistics, so the torch
    # side is the formula.
    {"name": "batch_norm_eval_4d",
     "inputs": {"x": f32(2, 3, 4, 5), "m": f32(3), "v": f32(3, gen="positive"), "w": f32(3), "b": f32(3)},
     "program": "y = batch_norm(x, m, v, w, b, eps=0.001)",
     "torch": lambda x, m, v, w, b: (x - m[None, :, None, None]) / torch.sqrt(v[None, :, None, None] + 1e-3)
                                    * w[None, :, None, None] + b[None, :, None, None]},
    {"name": "batch_norm_eval_2d",
     "inputs": {"x": f32(4, 3), "m": f32(3), "v": f32(3, gen="positive"), "w": f32(3), "b": f32(3)},
     "program": "y = batch_norm(x, m, v, w, b)",
     "torch": lambda x, m, v, w, b: (x - m) / torch.sqrt(v + 1e-5) * w + b},
]
