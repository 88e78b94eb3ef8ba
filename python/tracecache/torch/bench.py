"""`python3 -m tracecache.torch bench`: per-call time of a `tracecache.torch.compile`d model in
once mode against PyTorch eager and `torch.jit.trace` on the same inputs, in one run, the host
overhead of a tracecache call, and the capture time per ATen op.

The host overhead of a call is paired per call: its wall time minus the time tracecache's run
timer added during it (the backend executing the graph), so it is what the per-call path, the
guard check and the torch conversions cost, whatever the load does to the kernels; the median
over the calls is reported. Beside it, PyTorch eager's own per-call dispatch cost: the model's
eager call (under no_grad) on a copy of it on the `meta` device, whose tensors have shapes and
no data, so its time is Python, the module calls and ATen's dispatch and shape functions of
every op, without a kernel. (The smallest real input is no measure of it: BERT-base at 8 tokens
still streams its 340 MB of weights through the matmuls, 45 ms a call.)

Models: `resnet18` (torchvision, seeded, eval mode, image [1, 3, R, R]) and `bert` (a BERT-base
shaped encoder from torch.nn layers: 12 layers, hidden 768, 12 heads, ids [1, L]). Each is timed
over `calls` calls after warm-up calls (the capture and compile for tracecache); times are
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


def _host_us(tracecache, fn, args, calls, before=None):
    """Median over calls of (wall time - time the run timer gained): the per-call host cost.
    `before()`, when given, runs ahead of each call, outside the timing."""
    host = []
    for _ in range(calls):
        if before is not None:
            before()
        run_before = tracecache.timers().get("run", {}).get("total", 0.0)
        start = time.perf_counter()
        fn(*args)
        wall = time.perf_counter() - start
        run_ms = tracecache.timers().get("run", {}).get("total", 0.0) - run_before
        host.append(wall * 1e6 - run_ms * 1e3)
    return statistics.median(host)


def _dispatch_us(model, inputs, calls):
    """PyTorch eager's per-call cost without kernels: the model on the meta device."""
    import copy
    meta = copy.deepcopy(model).to("meta")
    args = tuple(t.to("meta") for t in inputs)
    with torch.no_grad():
        meta(*args)
        return _median_ms(meta, args, calls) * 1e3


def run(names, calls, resolution, length, threads=None):
    import tracecache
    from . import capture as capture_mod
    from .compiled import compile as tc_compile
    if threads is not None:
        torch.set_num_threads(threads)
    tracecache.configure(mode="once", no_cache=True, threads=threads)
    rows = []
    for name, model, inputs in _models(resolution, length):
        if names and name not in names:
            continue
        dispatch_us = _dispatch_us(model, inputs, calls)  # a copy, before the capture touches the model
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
        tracecache.configure(mode="once", no_cache=True, threads=threads)  # timers of this model only
        compiled = tc_compile(model)
        start = time.perf_counter()
        compiled(*inputs)
        first_ms = (time.perf_counter() - start) * 1e3
        compiled(*inputs)
        once = _median_ms(compiled, inputs, calls)
        host = _host_us(tracecache, compiled, inputs, calls)
        rows.append((name, eager, jit, once, host, dispatch_us, first_ms, capture_ms, ops))
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; tracecache "
          f"{tracecache.settings()['threads'] or 'default'} threads; {calls} calls, medians\n")
    print("| model | eager ms | jit.trace ms | tracecache once ms | tracecache host us/call "
          "| eager dispatch us/call (meta device) | first call ms (capture + compile) | capture ms | ATen ops "
          "| capture us/op |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, eager, jit, once, host, dispatch_us, first_ms, capture_ms, ops in rows:
        print(f"| {name} | {eager:.2f} | {jit:.2f} | {once:.2f} | {host:.1f} | {dispatch_us:.0f} | {first_ms:.0f} "
              f"| {capture_ms:.0f} | {ops} | {capture_ms * 1e3 / max(ops, 1):.0f} |")
