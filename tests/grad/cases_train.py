# Gradient cases of the training family against PyTorch 1.13, in the protocol of the tests/grad/
# harness. The inference dropout op is the identity (torch's dropout with training=False); the
# training mask (dropout_mask) cannot match torch's generator, so its gradient (upstream x mask,
# through mul) is checked by tests/capture/train_ops_test.cc instead.
import torch
import torch.nn.functional as F

CASES = [
    {"name": "dropout_eval", "inputs": {"x": ("f32", [3, 4], "normal")},
     "program": "y = dropout(x, p=0.5)",
     "torch": lambda x: F.dropout(x, 0.5, training=False)},
    {"name": "dropout_eval_in_chain", "inputs": {"x": ("f32", [2, 5], "normal"), "w": ("f32", [5, 3], "normal")},
     "program": "h = dropout(x, p=0.2)\ny = matmul(h, w)",
     "torch": lambda x, w: F.dropout(x, 0.2, training=False) @ w},
]
