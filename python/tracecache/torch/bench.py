"""`python3 -m tracecache.torch bench`: per-call time of a `tracecache.torch.compile`d model in
once mode against PyTorch eager and `torch.jit.trace` on the same inputs, in one run, and the
capture time per ATen op.

Models: `resnet18` (torchvision, seeded, eval mode, image [1, 3, R, R]) and `bert` (a BERT-base
shaped encoder from torch.nn layers: 12 layers, hidden 768, 12 heads, ids [1, L]). Each is timed
over `calls` calls after one warm-up call (the capture and compile for tracecache); times are
medians. The tracecache session is in-memory (`no_cache`), so the warm-up is a cold compile. The
capture time is a second capture of the model (the process's first one also warms PyTorch up);
it includes running the model once, as `make_fx` does in real mode, and recording every
node's Python stack.

Not thread-safe; prints a Markdown table.
"""

import statistics
import time

import torch
from torch import nn

__all__ = ["run"]


class _Bert(nn.Module):
    def __init__(self, vocab=30522, hidden=768, heads=12, layers=12, ffn=3072, max_len=512):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_len, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.encoder(self.norm(self.word(ids) + self.position(positions)))


def _models(resolution, length):
    import torchvision
    torch.manual_seed(0)
    yield "resnet18", torchvision.models.resnet18().eval(), (torch.randn(1, 3, resolution, resolution),)
    torch.manual_seed(0)
    yield "bert", _Bert().eval(), (torch.randint(0, 30522, (1, length)),)


def _median_ms(fn, args, calls):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def run(names, calls, resolution, length):
    import tracecache
    from . import capture as capture_mod
    from .compiled import compile as tc_compile
    tracecache.configure(mode="once", no_cache=True)
    rows = []
    for name, model, inputs in _models(resolution, length):
        if names and name not in names:
            continue
        capture_mod.capture_module(model, list(inputs))  # the first capture in a process warms PyTorch up
        start = time.perf_counter()
        graph = capture_mod.capture_module(model, list(inputs))
        capture_ms = (time.perf_counter() - start) * 1e3
        ops = sum(1 for n in graph.graph.graph.nodes if n.op == "call_function")
        with torch.enable_grad():  # the composite paths tracecache captures (see docs/python.md)
            eager = _median_ms(model, inputs, calls)
        with torch.no_grad():
            traced = torch.jit.trace(model, inputs, check_trace=False)
            traced(*inputs)
            jit = _median_ms(traced, inputs, calls)
        compiled = tc_compile(model)
        start = time.perf_counter()
        compiled(*inputs)
        first_ms = (time.perf_counter() - start) * 1e3
        once = _median_ms(compiled, inputs, calls)
        rows.append((name, eager, jit, once, first_ms, capture_ms, ops))
    print("| model | eager ms | jit.trace ms | tracecache once ms | first call ms (capture + compile) "
          "| capture ms | ATen ops | capture us/op |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, eager, jit, once, first_ms, capture_ms, ops in rows:
        print(f"| {name} | {eager:.2f} | {jit:.2f} | {once:.2f} | {first_ms:.0f} | {capture_ms:.0f} | {ops} "
              f"| {capture_ms * 1e3 / max(ops, 1):.0f} |")
