"""The op table of `tracecache.torch`: `LOWERINGS` maps an ATen overload
(`"aten.convolution.default"`) to its registration (the lowering function, the registry ops it
emits, a note), filled by the modules of `lowerings/` through `@lowers` when
`tracecache.torch.lowering` is imported (the lowering functions run on its `Lowerer`).

`table()` lists every mapping; docs/python.md holds that table (`python3 -m tracecache.torch ops
--markdown`; tests/python/test_torch_export.py checks it is current).

Read-only after import (registration happens at import time only); a target registered twice
is a programming error (an assertion).
"""

__all__ = ["LOWERINGS", "lowers", "table"]


class _Registration:
    def __init__(self, fn, ops, note):
        self.fn = fn
        self.ops = ops
        self.note = note


LOWERINGS = {}


def lowers(*targets, ops, note=""):
    """Registers a lowering for ATen overloads (`"aten.relu.default"`); `ops` names the registry
    ops it emits (for the docs table), `note` says what the composition does, if anything."""
    def register(fn):
        for t in targets:
            assert t not in LOWERINGS, t
            LOWERINGS[t] = _Registration(fn, ops, note)
        return fn
    return register


def table():
    """The mapping as rows (ATen op, tracecache ops, note), sorted by ATen op name. In-place
    variants (`relu_`, `add_`, ...) map as their functional op."""
    return [(name, reg.ops, reg.note) for name, reg in sorted(LOWERINGS.items())]
