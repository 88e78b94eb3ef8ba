"""Gradient cases of the ops ONNX models need (issue 16; capture/ops/grad_onnx.cc and the later
ONNX families), compared with PyTorch 1.13 by tests/grad (torch_grads.py and grad_check.cc; the
protocol is in torch_grads.py).

floor, ceil, round and trunc_div are flat: PyTorch's gradient is 0 everywhere and so is ours.
remainder and fmod jump where a / b is an integer; random inputs land on a jump with probability 0,
and the harness skips the finite-difference check where PyTorch's own one fails (a jump within
FD_EPS).
"""
import torch
import torch.nn.functional as F


def f32(shape, gen="normal"):
    return ("f32", shape, gen)


CASES = [
    # ---- elementwise ----
    {"name": "floor", "inputs": {"a": f32([2, 3])}, "program": "y = floor(a)", "torch": torch.floor},
    {"name": "ceil", "inputs": {"a": f32([2, 3])}, "program": "y = ceil(a)", "torch": torch.ceil},
    {"name": "round", "inputs": {"a": f32([2, 3])}, "program": "y = round(a)", "torch": torch.round},
    {"name": "sin", "inputs": {"a": f32([2, 3])}, "program": "y = sin(a)", "torch": torch.sin},
    {"name": "cos", "inputs": {"a": f32([2, 3])}, "program": "y = cos(a)", "torch": torch.cos},
    {"name": "remainder_broadcast", "inputs": {"a": f32([2, 3], "uniform:-4:4"), "b": f32([3], "positive")},
     "program": "y = remainder(a, b)", "torch": torch.remainder},
    {"name": "remainder_negative_divisor", "inputs": {"a": f32([2, 3], "uniform:-4:4"),
                                                      "b": f32([2, 1], "uniform:-2:-0.5")},
     "program": "y = remainder(a, b)", "torch": torch.remainder},
    {"name": "fmod_broadcast", "inputs": {"a": f32([2, 3], "uniform:-4:4"), "b": f32([3], "positive")},
     "program": "y = fmod(a, b)", "torch": torch.fmod},
    {"name": "trunc_div", "inputs": {"a": f32([2, 3], "uniform:-4:4"), "b": f32([3], "positive")},
     "program": "y = trunc_div(a, b)", "torch": lambda a, b: torch.div(a, b, rounding_mode="trunc")},
    # ---- reductions ----
    {"name": "min_axis", "inputs": {"a": f32([3, 4])},
     "program": "y = min(a, axes=[1])", "torch": lambda a: torch.amin(a, dim=1)},
    {"name": "min_ties_keepdim", "inputs": {"a": f32([3, 4], "ties")},
     "program": "y = min(a, axes=[0], keepdim=true)", "torch": lambda a: torch.amin(a, dim=0, keepdim=True)},
    # ---- topk: the selected elements get their gradient ----
    {"name": "topk_last_axis", "inputs": {"a": f32([3, 6])},
     "program": "y = topk(a, k=2)", "torch": lambda a: torch.topk(a, 2)[0]},
    {"name": "topk_smallest_axis0", "inputs": {"a": f32([5, 4])},
     "program": "y = topk(a, k=3, axis=0, largest=false)", "torch": lambda a: torch.topk(a, 3, dim=0, largest=False)[0]},
    # ---- scatter_elements: PyTorch's scatter (none) and scatter_add (add) ----
    {"name": "scatter_elements_none", "inputs": {"x": f32([4, 3]), "i": ("i64", [2, 3], "int:0:4"), "u": f32([2, 3])},
     "program": "y = scatter_elements(x, i, u, axis=0)", "torch": lambda x, i, u: torch.scatter(x, 0, i, u)},
    {"name": "scatter_elements_add", "inputs": {"x": f32([3, 5]), "i": ("i64", [3, 4], "int:0:5"), "u": f32([3, 4])},
     "program": "y = scatter_elements(x, i, u, axis=1, reduction=1)",
     "torch": lambda x, i, u: torch.scatter_add(x, 1, i, u)},
    # ---- resize: PyTorch's interpolate backward where the modes agree ----
    {"name": "resize_nearest_up", "inputs": {"x": f32([2, 3, 3, 4])},
     "program": "y = resize_nearest2d(x, size=[6, 8], coordinate_transformation_mode=1, nearest_mode=2)",
     "torch": lambda x: F.interpolate(x, size=(6, 8), mode="nearest")},
    {"name": "resize_nearest_exact_down", "inputs": {"x": f32([1, 2, 7, 5])},
     "program": "y = resize_nearest2d(x, size=[3, 4], nearest_mode=1)",
     "torch": lambda x: F.interpolate(x, size=(3, 4), mode="nearest-exact")},
    {"name": "resize_bilinear", "inputs": {"x": f32([2, 2, 4, 5])},
     "program": "y = resize_linear2d(x, size=[7, 9], coordinate_transformation_mode=3)",
     "torch": lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False)},
    {"name": "resize_bilinear_align_corners", "inputs": {"x": f32([1, 3, 5, 3])},
     "program": "y = resize_linear2d(x, size=[3, 8], coordinate_transformation_mode=2)",
     "torch": lambda x: F.interpolate(x, size=(3, 8), mode="bilinear", align_corners=True)},
    # ---- conv_transpose2d ----
    {"name": "conv_transpose2d_bias", "inputs": {"x": f32([2, 3, 4, 5]), "w": f32([3, 2, 3, 3]), "b": f32([2])},
     "program": "y = conv_transpose2d(x, w, b)", "torch": F.conv_transpose2d},
    {"name": "conv_transpose2d_strided", "inputs": {"x": f32([1, 4, 3, 4]), "w": f32([4, 3, 3, 2])},
     "program": "y = conv_transpose2d(x, w, stride=[2, 3], padding=[1, 0], output_padding=[1, 2], dilation=[2, 1], groups=2)",
     "torch": lambda x, w: F.conv_transpose2d(x, w, stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2,
                                              dilation=(2, 1))},
]
