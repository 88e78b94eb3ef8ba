# Gradient cases of the lookups (embedding, gather, index_select), layer_norm, softmax,
# log_softmax, scaled_dot_product_attention and scatter_add against PyTorch 1.13, in the
# protocol of the tests/grad/ harness: each case names its inputs (dtype, shape, generator), a
# program in .trace op syntax whose last assigned name is the result, and the same computation in
# torch. Every floating input is differentiated; integer inputs (indices) never are.
# Index generators stay in range: PyTorch raises on an out-of-range index where tracecache clamps
# (docs/ops.md), so the clamped case is checked by tests/capture/grad_nn_ops_test.cc instead.
import math

import torch


def _attention(q, k, v, mask=None, causal=False, scale=0.0):
    # torch 1.13 has no F.scaled_dot_product_attention: its math path, spelled out.
    s = scale if scale != 0 else 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * s
    if mask is not None:
        scores = scores + mask
    if causal:
        lq, lk = scores.shape[-2], scores.shape[-1]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _scatter_add(x, axis, index, src):
    return x.scatter_add(axis, index, src)


def _block(tok, tgt, emb, lw, lb, wq, wk, wv, head):
    x = torch.nn.functional.embedding(tok, emb)
    h = torch.nn.functional.layer_norm(x, [x.shape[-1]], lw, lb)
    a = _attention(h @ wq, h @ wk, h @ wv, causal=True)
    logp = torch.log_softmax((x + a) @ head, -1)
    return torch.gather(logp, 2, tgt)


CASES = [
    # ---- embedding: duplicate rows accumulate; any index rank ----
    {"name": "embedding_dupes",
     "inputs": {"w": ("f32", [5, 3], "normal"), "i": ("i64", [2, 6], "int:0:5")},
     "program": "y = embedding(w, i)",
     "torch": lambda w, i: torch.nn.functional.embedding(i, w)},
    {"name": "embedding_i32_rank1",
     "inputs": {"w": ("f32", [4, 2], "normal"), "i": ("i32", [7], "int:0:2")},
     "program": "y = embedding(w, i)",
     "torch": lambda w, i: torch.nn.functional.embedding(i.long(), w)},
    {"name": "embedding_rank3_index",
     "inputs": {"w": ("f32", [6, 4], "normal"), "i": ("i64", [2, 2, 3], "int:0:6")},
     "program": "y = embedding(w, i)",
     "torch": lambda w, i: torch.nn.functional.embedding(i, w)},
    # ---- gather ----
    {"name": "gather_axis1_dupes",
     "inputs": {"x": ("f32", [3, 4], "normal"), "i": ("i64", [3, 5], "int:0:4")},
     "program": "y = gather(x, i, axis=1)",
     "torch": lambda x, i: torch.gather(x, 1, i)},
    {"name": "gather_axis0_smaller_index",
     "inputs": {"x": ("f32", [4, 5], "normal"), "i": ("i64", [6, 3], "int:0:4")},
     "program": "y = gather(x, i, axis=0)",
     "torch": lambda x, i: torch.gather(x, 0, i)},
    {"name": "gather_negative_axis_rank3",
     "inputs": {"x": ("f32", [2, 3, 4], "normal"), "i": ("i32", [2, 2, 6], "int:0:4")},
     "program": "y = gather(x, i, axis=-1)",
     "torch": lambda x, i: torch.gather(x, -1, i.long())},
    # ---- index_select ----
    {"name": "index_select_axis0_dupes",
     "inputs": {"x": ("f32", [4, 3], "normal"), "i": ("i64", [7], "int:0:4")},
     "program": "y = index_select(x, i, axis=0)",
     "torch": lambda x, i: torch.index_select(x, 0, i)},
    {"name": "index_select_negative_axis",
     "inputs": {"x": ("f32", [2, 3, 5], "normal"), "i": ("i32", [4], "int:0:5")},
     "program": "y = index_select(x, i, axis=-1)",
     "torch": lambda x, i: torch.index_select(x, -1, i.long())},
    {"name": "index_select_middle_axis",
     "inputs": {"x": ("f32", [2, 3, 5], "normal"), "i": ("i64", [5], "int:0:3")},
     "program": "y = index_select(x, i, axis=1)",
     "torch": lambda x, i: torch.index_select(x, 1, i)},
    # ---- layer_norm: x, weight, bias; 1 to 3 inputs; several normalized dims ----
    {"name": "layer_norm_x_only",
     "inputs": {"x": ("f32", [3, 5], "normal")},
     "program": "y = layer_norm(x, normalized_dims=1)",
     "torch": lambda x: torch.nn.functional.layer_norm(x, [5])},
    {"name": "layer_norm_weight",
     "inputs": {"x": ("f32", [2, 3, 4], "normal"), "w": ("f32", [4], "normal")},
     "program": "y = layer_norm(x, w, normalized_dims=1, eps=0.01)",
     "torch": lambda x, w: torch.nn.functional.layer_norm(x, [4], w, None, 0.01)},
    {"name": "layer_norm_weight_bias_2dims",
     "inputs": {"x": ("f32", [2, 3, 4], "normal"), "w": ("f32", [3, 4], "normal"), "b": ("f32", [3, 4], "normal")},
     "program": "y = layer_norm(x, w, b, normalized_dims=2)",
     "torch": lambda x, w, b: torch.nn.functional.layer_norm(x, [3, 4], w, b)},
    {"name": "layer_norm_all_dims",
     "inputs": {"x": ("f32", [3, 4], "uniform:-3:3"), "w": ("f32", [3, 4], "positive"), "b": ("f32", [3, 4], "normal")},
     "program": "y = layer_norm(x, w, b, normalized_dims=2, eps=0.00001)",
     "torch": lambda x, w, b: torch.nn.functional.layer_norm(x, [3, 4], w, b, 1e-5)},
    # ---- softmax, log_softmax ----
    {"name": "softmax_last",
     "inputs": {"x": ("f32", [3, 5], "normal")},
     "program": "y = softmax(x, axis=-1)",
     "torch": lambda x: torch.softmax(x, -1)},
    {"name": "softmax_axis0_rank3",
     "inputs": {"x": ("f32", [4, 2, 3], "normal")},
     "program": "y = softmax(x, axis=0)",
     "torch": lambda x: torch.softmax(x, 0)},
    {"name": "softmax_ties",
     "inputs": {"x": ("f32", [3, 4], "ties")},
     "program": "y = softmax(x, axis=1)",
     "torch": lambda x: torch.softmax(x, 1)},
    {"name": "log_softmax_last",
     "inputs": {"x": ("f32", [3, 5], "normal")},
     "program": "y = log_softmax(x, axis=1)",
     "torch": lambda x: torch.log_softmax(x, 1)},
    {"name": "log_softmax_middle_negative_axis",
     "inputs": {"x": ("f32", [2, 4, 3], "uniform:-4:4")},
     "program": "y = log_softmax(x, axis=-2)",
     "torch": lambda x: torch.log_softmax(x, -2)},
    # ---- scaled_dot_product_attention: dq, dk, dv, the float mask; causal; scale ----
    {"name": "attention_plain",
     "inputs": {"q": ("f32", [2, 3, 4], "normal"), "k": ("f32", [2, 5, 4], "normal"), "v": ("f32", [2, 5, 3], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v)",
     "torch": lambda q, k, v: _attention(q, k, v)},
    {"name": "attention_scale",
     "inputs": {"q": ("f32", [3, 4], "normal"), "k": ("f32", [6, 4], "normal"), "v": ("f32", [6, 2], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v, scale=0.3)",
     "torch": lambda q, k, v: _attention(q, k, v, scale=0.3)},
    {"name": "attention_causal_lq_lt_lk",
     "inputs": {"q": ("f32", [2, 2, 3, 4], "normal"), "k": ("f32", [2, 2, 5, 4], "normal"), "v": ("f32", [2, 2, 5, 3], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v, causal=true)",
     "torch": lambda q, k, v: _attention(q, k, v, causal=True)},
    {"name": "attention_causal_lq_gt_lk_scale",
     "inputs": {"q": ("f32", [2, 5, 4], "normal"), "k": ("f32", [2, 3, 4], "normal"), "v": ("f32", [2, 3, 2], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v, causal=true, scale=0.7)",
     "torch": lambda q, k, v: _attention(q, k, v, causal=True, scale=0.7)},
    {"name": "attention_full_mask",
     "inputs": {"q": ("f32", [2, 3, 4], "normal"), "k": ("f32", [2, 5, 4], "normal"), "v": ("f32", [2, 5, 3], "normal"),
                "m": ("f32", [2, 3, 5], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v, m)",
     "torch": lambda q, k, v, m: _attention(q, k, v, m)},
    {"name": "attention_broadcast_mask_causal",
     "inputs": {"q": ("f32", [2, 2, 4, 3], "normal"), "k": ("f32", [2, 2, 4, 3], "normal"), "v": ("f32", [2, 2, 4, 5], "normal"),
                "m": ("f32", [2, 1, 4], "normal")},
     "program": "y = scaled_dot_product_attention(q, k, v, m, causal=true)",
     "torch": lambda q, k, v, m: _attention(q, k, v, m, causal=True)},
    {"name": "attention_row_mask_scale",
     "inputs": {"q": ("f32", [3, 2], "normal"), "k": ("f32", [4, 2], "normal"), "v": ("f32", [4, 3], "normal"),
                "m": ("f32", [4], "uniform:-2:0")},
     "program": "y = scaled_dot_product_attention(q, k, v, m, scale=1.5)",
     "torch": lambda q, k, v, m: _attention(q, k, v, m, scale=1.5)},
    # ---- scatter_add (the primitive): dx and dsrc, duplicates ----
    {"name": "scatter_add_axis0_dupes",
     "inputs": {"x": ("f32", [3, 4], "normal"), "i": ("i64", [5, 4], "int:0:3"), "s": ("f32", [5, 4], "normal")},
     "program": "y = scatter_add(x, i, s, axis=0)",
     "torch": lambda x, i, s: _scatter_add(x, 0, i, s)},
    {"name": "scatter_add_negative_axis_smaller_index",
     "inputs": {"x": ("f32", [3, 4], "normal"), "i": ("i32", [2, 6], "int:0:4"), "s": ("f32", [2, 6], "normal")},
     "program": "y = scatter_add(x, i, s, axis=-1)",
     "torch": lambda x, i, s: _scatter_add(x, -1, i.long(), s)},
    # ---- all of them in one tiny transformer block ----
    {"name": "transformer_block",
     "inputs": {"tok": ("i64", [2, 5], "int:0:7"), "tgt": ("i64", [2, 5, 1], "int:0:7"),
                "emb": ("f32", [7, 8], "normal"), "lw": ("f32", [8], "positive"), "lb": ("f32", [8], "normal"),
                "wq": ("f32", [8, 8], "normal"), "wk": ("f32", [8, 8], "normal"), "wv": ("f32", [8, 8], "normal"),
                "head": ("f32", [8, 7], "normal")},
     "program": """
x = embedding(emb, tok)
h = layer_norm(x, lw, lb, normalized_dims=1)
q = matmul(h, wq)
k = matmul(h, wk)
v = matmul(h, wv)
a = scaled_dot_product_attention(q, k, v, causal=true)
r = add(x, a)
z = matmul(r, head)
lp = log_softmax(z, axis=-1)
y = gather(lp, tgt, axis=2)
""",
     "torch": _block},
]
