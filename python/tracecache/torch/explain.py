"""`tracecache.torch.explain(fn, *args, **kwargs)`: what compiling `fn` would make of this call,
without running the compiled path (as `torch._dynamo.explain`).

It captures the call with `make_fx` (running the program once in PyTorch, as a first compiled
call does) and lowers the graph onto a counting emitter instead of tracecache: the graphs
tracecache would run, the registry ops of each, and the graph breaks between them, each with its
reason and the user's line: an ATen op PyTorch runs on the host (no mapping, or a use of it the
mapping refuses) or a value read into Python (`.item()`, `bool()`, a data-dependent branch).
Nothing is compiled, cached or counted as a capture of a compiled module.

Not thread-safe. Errors: as `compile(fn)(*args)` would raise them at capture (an op that cannot
even break, a value PyTorch cannot produce), `TypeError` for arguments a compiled module refuses.
"""

import json

from . import capture as capture_mod
from .lowering import lower

__all__ = ["explain", "ExplainOutput", "GraphBreak"]


class GraphBreak:
    """One graph break: `op` (`aten.cumsum.default`, or `value read`), `reason`, and `where`
    (the user's line, `file.py:12 in forward: y = ...`, or None)."""

    def __init__(self, op, reason, where):
        self.op = op
        self.reason = reason
        self.where = where

    def __repr__(self):
        return f"GraphBreak({self.op!r}, {self.reason!r}, {self.where!r})"


class ExplainOutput:
    """`graphs` (how many graphs tracecache would run), `breaks` (GraphBreak, in order),
    `ops_per_graph` (per graph, its registry ops in order) and `graph_break_count`."""

    def __init__(self, ops_per_graph, breaks):
        self.ops_per_graph = ops_per_graph
        self.breaks = breaks

    @property
    def graphs(self):
        return len(self.ops_per_graph)

    @property
    def graph_break_count(self):
        return len(self.breaks)

    def __str__(self):
        lines = [f"{self.graphs} graph{'s' if self.graphs != 1 else ''}, {self.graph_break_count} graph "
                 f"break{'s' if self.graph_break_count != 1 else ''}"]
        for k, ops in enumerate(self.ops_per_graph):
            lines.append(f"graph {k}: {len(ops)} ops")
        for k, b in enumerate(self.breaks):
            lines.append(f"break {k}: {b.op}: {b.reason}{f' (at {b.where})' if b.where else ''}")
        return "\n".join(lines)


class _Token:
    __slots__ = ()


class _CountingEmitter:
    """An emitter that records registry ops per graph and starts a new graph at every break."""

    def __init__(self):
        self.graphs = [[]]

    def op(self, name, inputs, attrs):
        self.graphs[-1].append(name)
        return _Token()

    def constant(self, target, tensor):
        return _Token()

    def read(self, handle):
        self.graphs.append([])

    def host_op(self, payload, inputs, description):
        self.graphs.append([])
        return [_Token() for r in json.loads(payload)["results"] if r]


def explain(fn, *args, **kwargs):
    """What `tracecache.torch.compile(fn)(*args, **kwargs)` would run: an ExplainOutput. `fn` may
    also be a CompiledModule or CompiledStep (its module's state and optimizer are used)."""
    from .compiled import CompiledModule, _flatten_call
    module = fn if isinstance(fn, CompiledModule) else CompiledModule(fn)
    flat, spec, tensors, key = _flatten_call(args, kwargs)
    state = module._state()
    before = capture_mod.captures()
    graph = module._capture_now(state, flat, spec, tensors)
    capture_mod.uncount_captures(capture_mod.captures() - before)
    emitter = _CountingEmitter()
    lowered = lower(graph.graph, emitter, [_Token() for _ in graph.names], breaks=True, seed=_Token())
    ops = [g for g in emitter.graphs if g] or [[]]
    return ExplainOutput(ops, [GraphBreak(*b) for b in lowered.breaks])
