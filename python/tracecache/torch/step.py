"""`tracecache.torch.compile_step(fn, model, optimizer)`: a whole training step as one graph.

`fn(*inputs)` is an ordinary PyTorch training step over `model` and `optimizer`: forward,
`loss.backward()` (or `torch.autograd.grad`), `torch.nn.utils.clip_grad_norm_`, `optimizer.step()`.
It is captured with `make_fx` once per argument types (the backward's ATen ops included) and
lowered with the one mapping; the model's parameters and buffers and the optimizer's state are
arguments of the graph, and their new values are outputs that replace them (in once mode the
compiled function donates their storage, `tracecache.compile(updates=...)`). After each call the
new values are copied into the model's parameters and buffers and the optimizer's state, so
PyTorch code around the step sees them. The call returns `fn`'s result as torch tensors.

The capture runs `fn` on copies: the model, its gradients and the optimizer are left as they
were. Each step starts from no gradients (as after `optimizer.zero_grad(set_to_none=True)`);
`p.grad` is not written back.

Optimizers: `torch.optim.SGD` (momentum with dampening 0, Nesterov, weight decay) and
`torch.optim.Adam`/`AdamW`. Their missing state is created first with the zeros the optimizer
itself would create (a momentum buffer of zeros gives the same first step when dampening is 0).
Adam's bias corrections are computed from its `step` tensor by ops (the optimizer's
`differentiable` formulation, used during the capture), so one graph serves every step. A
step that reads a value into Python (`.item()`) is refused, naming the line.

Not thread-safe. Errors: `CaptureError`, `TypeError` for arguments that are not tensors,
`ValueError` for an optimizer it does not support.
"""

import collections
import contextlib
import hashlib

import torch

from . import capture as capture_mod
from .. import _feed_code
from .compiled import CompiledModule, _flatten_call, _rebuild, split_outputs
from .lowering import lower

__all__ = ["CompiledStep", "compile_step"]


def _optimizer_slots(optimizer):
    """The state names of each parameter, in a fixed order, and whether zeros initialize them."""
    if isinstance(optimizer, torch.optim.SGD):
        for group in optimizer.param_groups:
            if group["momentum"] != 0 and group["dampening"] != 0:
                raise ValueError("tracecache.torch.compile_step: SGD with dampening != 0 starts its momentum "
                                 "buffer differently on the first step; use dampening=0")
        return lambda group: ["momentum_buffer"] if group["momentum"] != 0 else []
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return lambda group: ["step", "exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])
    raise ValueError(f"tracecache.torch.compile_step supports torch.optim.SGD, Adam and AdamW, not "
                     f"{type(optimizer).__name__}")


class CompiledStep(CompiledModule):
    """A training step compiled as one graph (see the module docstring)."""

    _allow_respecialize = False
    _allow_fast = False

    def __init__(self, fn, model, optimizer, name=None, version=None, fullgraph=False, mode=None):
        import tracecache
        self.step_fn = fn
        self.model = model
        self.optimizer = optimizer
        self._slots = _optimizer_slots(optimizer) if optimizer is not None else None
        super().__init__(model, name=name or tracecache.default_name(fn), version=version, fullgraph=fullgraph,
                         mode=mode)
        self.program = getattr(fn, "__module__", None) or self.program
        h = hashlib.sha256(self._base_version.encode())
        code = getattr(fn, "__code__", None)
        if code is not None:
            _feed_code(h, code)
        if optimizer is not None:
            h.update(type(optimizer).__qualname__.encode())
            for group in optimizer.param_groups:
                h.update(repr(sorted((k, v) for k, v in group.items() if k != "params")).encode())
        self._base_version = h.hexdigest()[:32]
        self._keys = []

    # -- the state: model parameters and buffers, then the optimizer's ---------------------

    def _optimizer_state(self):
        """(parameter, slot) pairs and their tensors, creating missing state as zeros."""
        if self.optimizer is None:
            return [], []
        keys, tensors = [], []
        params = {id(t) for t in super()._state()}
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in params:
                    raise ValueError("tracecache.torch.compile_step: the optimizer holds a tensor that is not a "
                                     "parameter of the model")
                state = self.optimizer.state[p]
                for slot in self._slots(group):
                    if slot not in state:
                        state[slot] = torch.tensor(0.0) if slot == "step" else torch.zeros_like(p)
                    keys.append((p, slot))
                    tensors.append(state[slot])
        return keys, tensors

    def _state(self):
        """The model's parameters and buffers, then the optimizer's state (made if missing)."""
        keys, opt = self._optimizer_state()
        self._keys = keys
        return super()._state() + opt

    # -- capture ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _swapped(self, copies, opt_copies, keys):
        """Installs the copies into the model and the optimizer for the capture, and restores
        the originals afterwards."""
        saved_model = [(m, kind, a, getattr(m, kind)[a]) for _, m, a, kind in self._accessors]
        saved_groups = [list(g["params"]) for g in self.optimizer.param_groups] if self.optimizer else []
        saved_state = self.optimizer.state if self.optimizer else None
        saved_diff = [g.get("differentiable") for g in self.optimizer.param_groups] if self.optimizer else []
        try:
            by_id = {}
            for (m, kind, a, original), copy in zip(saved_model, copies):
                getattr(m, kind)[a] = copy
                by_id[id(original)] = copy
            if self.optimizer is not None:
                for g in self.optimizer.param_groups:
                    g["params"] = [by_id[id(p)] for p in g["params"]]
                    if isinstance(self.optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                        g["differentiable"] = True
                new_state = collections.defaultdict(dict)
                for (p, slot), t in zip(keys, opt_copies):
                    new_state[by_id[id(p)]][slot] = t
                self.optimizer.state = new_state
            yield
        finally:
            for m, kind, a, original in saved_model:
                getattr(m, kind)[a] = original
            if self.optimizer is not None:
                for g, params, diff in zip(self.optimizer.param_groups, saved_groups, saved_diff):
                    g["params"] = params
                    if diff is None:
                        g.pop("differentiable", None)
                    else:
                        g["differentiable"] = diff
                self.optimizer.state = saved_state

    def _capture_now(self, state, flat, spec, tensors):
        n_model = len(self._accessors)
        model_state, opt = state[:n_model], state[n_model:]
        keys = self._keys
        copies = []
        for t in model_state:
            c = t.detach().clone()
            if isinstance(t, torch.nn.Parameter):
                c = torch.nn.Parameter(c, requires_grad=t.requires_grad)
            copies.append(c)
        opt_copies = [t.detach().clone() for t in opt]
        fn, skip = self.step_fn, len(copies) + len(opt_copies)

        def call(*all_args):
            args, kwargs = _rebuild(flat, spec, all_args[skip:])
            return fn(*args, **kwargs)
        names = self._names(keys)
        with self._swapped(copies, opt_copies, keys):
            return capture_mod.capture(call, names, copies + opt_copies,
                                       [f"input{i}" for i in range(len(tensors))], list(tensors))

    def _names(self, keys):
        names = {id(t): n for n, t in zip(self.state_names, super()._state())}
        return self.state_names + [f"optimizer.{names[id(p)]}.{slot}" for p, slot in keys]

    def _argument_names(self):
        return self._names(self._keys)

    def _signature(self, state, tensors, key):
        return super()._signature(state, tensors, key) + (len(state),)

    def _lower(self, graph, handles, emitter, seed):
        lowered = lower(graph.graph, emitter, handles, breaks=not self.fullgraph, seed=seed)
        self._count_lowering()
        n = graph.num_state
        finals = [lowered.updates.get(i) for i in range(n)]
        state_out = [handles[i] if v is None else v.handle for i, v in enumerate(finals)]
        tensors, constants = split_outputs(lowered.outputs, "output {} of the step")
        return state_out + tensors, lowered.out_spec, constants, lowered.breaks

    # -- calls -------------------------------------------------------------------------------

    def _updates(self, count):
        return [(i, i) for i in range(self._num_state)]

    def __call__(self, *args, **kwargs):
        flat, spec, tensors, key = _flatten_call(args, kwargs)
        state = self._state()
        self._num_state = len(state)
        if self._per_call():
            out, out_spec, constants = self._call_lazy(state, flat, spec, tensors, key)
        else:
            out, out_spec, constants = self._call_once(state, flat, spec, tensors, key, skip=len(state))
        with torch.no_grad():
            for t, new in zip(state, out[:len(state)]):
                t.copy_(new.torch())
        self._wrappers = {}
        return self._assemble(out[len(state):], out_spec, constants)


def compile_step(fn, model, optimizer=None, *, name=None, version=None, fullgraph=False, mode=None):
    """A training step `fn(*inputs)` over `model` (and `optimizer`) compiled as one graph whose
    new parameters, buffers and optimizer state are written back after every call. It traces
    once with guards (whatever the session's mode; `mode="lazy"` lowers on every call)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("tracecache.torch.compile_step takes the step function, the torch.nn.Module it trains "
                        "and its optimizer")
    return CompiledStep(fn, model, optimizer, name=name, version=version, fullgraph=fullgraph, mode=mode)
