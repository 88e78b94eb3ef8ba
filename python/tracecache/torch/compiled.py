"""`tracecache.torch.compile(module_or_fn)`: PyTorch code run as cached tracecache graphs.

The returned `CompiledModule` is called like the module. In once mode (`tracecache.configure(
mode="once")`) a call passes the module's parameters and buffers (in `state_dict` order) and
the call's torch tensors to one `tracecache.compile`d function. That function's body runs only
when tracecache must trace (no guard entry holds): it captures the module with `make_fx` on the
call's own tensors and lowers the ATen graph onto the lazy proxies with `tracecache.op`. Every
other call checks the C++ guards (dtype, shape, ...) on the arguments and replays the cached
executables: no capture, no lowering, no Python per op.

The compiled function's name and version are computed without capturing: the module classes
(qualified names and a digest of their code), every submodule's plain attributes (strides,
eps, ...) and training flag, the state names, dtypes and shapes, the torch version and a digest
of this package's capture and lowering code. A new process with the same cache database and
the same model therefore finds the stored guard entries: zero captures and zero compiles. The
output structure (a tensor, a tuple, a dict, ...) is stored beside the database under the same
key, since the function's body does not run on a replay.

Parameters are arguments of every call, never constants: an update the user makes between
calls (an optimizer step, `p.data.copy_(...)`, a new `nn.Parameter`) is seen by the next call.
The torch -> tracecache wrappers of parameters are reused while the tensor is the same object
with the same `_version` (they share memory, zero-copy).

In lazy and eager mode a call lowers the (cached) capture onto new lazy tensors every call, as
Lazy Tensor Core does; the graph cache still serves the executables.

Captures in this process: `tracecache.torch.stats()["captures"]`.

Not thread-safe: call a CompiledModule from one thread at a time. Errors: `CaptureError` (an
op or pattern that cannot be lowered, naming the op and the user's line), `tracecache.Error`
(the runtime's), `TypeError` for arguments that are not torch tensors.
"""

import hashlib
import inspect
import json
import os
import warnings

import torch
from torch.utils import _pytree as pytree

from .. import _feed_code
from . import capture as capture_mod
from .emit_live import LiveEmitter
from .errors import CaptureError
from .lowering import TORCH_DTYPES, lower, output_structure

__all__ = ["CompiledModule", "compile", "stats"]

_lowerings = 0


def stats():
    """This process's counts: `captures` (make_fx runs) and `lowerings` (graphs lowered onto
    tracecache ops: one per trace in once mode, one per call in lazy and eager mode)."""
    return {"captures": capture_mod.captures(), "lowerings": _lowerings}


def _package_digest():
    """A digest of this package's code (every .py file under tracecache/torch, by relative path):
    a change to capture or lowering gives every compiled module a new version."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    files = []
    for root, dirs, names in os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(root, n) for n in names if n.endswith(".py")]
    for path in sorted(files):
        h.update(os.path.relpath(path, here).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


_PACKAGE_DIGEST = _package_digest()


def _class_digest(h, cls, seen):
    for klass in cls.__mro__:
        if klass in seen or klass is object:
            continue
        seen.add(klass)
        h.update(f"{klass.__module__}.{klass.__qualname__}".encode())
        for name, member in sorted(vars(klass).items()):
            fn = getattr(member, "__func__", member)
            code = getattr(fn, "__code__", None)
            if code is not None:
                h.update(name.encode())
                _feed_code(h, code)


def _plain(v):
    """A stable text for a plain attribute value, or None for values that are not plain."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, (tuple, list)):
        items = [_plain(x) for x in v]
        return None if None in items else f"{type(v).__name__}({', '.join(items)})"
    if isinstance(v, torch.dtype):
        return str(v)
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '')}.{v.__qualname__}"
    return None


def module_version(module, state):
    """The version of a module's compiled function, without the training flags (which
    `CompiledModule` adds per call): a digest of what decides its graph other than the argument
    types the guards check."""
    h = hashlib.sha256()
    h.update(torch.__version__.encode())
    h.update(_PACKAGE_DIGEST.encode())
    seen = set()
    for path, m in module.named_modules():
        h.update(f"module {path}".encode())
        _class_digest(h, type(m), seen)
        for key, value in sorted(vars(m).items()):
            if key.startswith("_") and key not in ("_qkv_same_embed_dim",):
                continue
            text = _plain(value)
            if text is not None:
                h.update(f"{key}={text}".encode())
    for name, t in state:
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
    return h.hexdigest()[:32]


def function_version(fn):
    h = hashlib.sha256()
    h.update(torch.__version__.encode())
    h.update(_PACKAGE_DIGEST.encode())
    code = getattr(fn, "__code__", None)
    if code is None:
        _class_digest(h, type(fn), set())
    else:
        _feed_code(h, code)
    return h.hexdigest()[:32]


# -- output structures -----------------------------------------------------------------------

def _spec_to_json(spec):
    if isinstance(spec, pytree.LeafSpec):
        return {"t": "leaf"}
    children = [_spec_to_json(c) for c in spec.children_specs]
    if spec.type is tuple:
        return {"t": "tuple", "c": children}
    if spec.type is list:
        return {"t": "list", "c": children}
    if spec.type is dict:
        if not all(isinstance(k, (str, int)) for k in spec.context):
            return None
        return {"t": "dict", "k": list(spec.context), "c": children}
    return None


def _spec_from_json(data):
    if data["t"] == "leaf":
        return pytree.LeafSpec()
    children = [_spec_from_json(c) for c in data["c"]]
    if data["t"] == "tuple":
        return pytree.TreeSpec(tuple, None, children)
    if data["t"] == "list":
        return pytree.TreeSpec(list, None, children)
    return pytree.TreeSpec(dict, list(data["k"]), children)


def split_outputs(outputs, name):
    """A lowered graph's flattened outputs as (tensor handles, constants): per output None for
    a tensor, else the number it is. `name` formats an output's index for the error raised for
    anything else ("output {}")."""
    tensors, constants = [], []
    for k, v in enumerate(outputs):
        if hasattr(v, "handle"):
            tensors.append(v.handle)
            constants.append(None)
        elif isinstance(v, (bool, int, float)) or v is None:
            constants.append(v)
        else:
            raise CaptureError(f"tracecache.torch: {name.format(k)} is {type(v).__name__}; outputs are tensors "
                               f"and numbers")
    return tensors, constants


def _structure_note(spec, constants):
    """The output structure as the compiled function's entry note (JSON), or None when the
    structure has no JSON form (then a new process captures once to learn it)."""
    encoded = _spec_to_json(spec)
    if encoded is None:
        return None
    try:
        return json.dumps({"spec": encoded, "constants": constants}).encode()
    except (TypeError, ValueError):
        return None


def _structure_from_note(note):
    """(spec, constants) from an entry note, or None when there is none or it is malformed
    (notes come from the cache: untrusted)."""
    if not note:
        return None
    try:
        data = json.loads(note.decode())
        spec, constants = _spec_from_json(data["spec"]), data["constants"]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(constants, list) or len(constants) != spec.num_leaves or \
            not all(c is None or isinstance(c, (bool, int, float)) for c in constants):
        return None
    return spec, constants


# -- the compiled module ---------------------------------------------------------------------

def _state_accessors(module):
    """(name, owning submodule, attribute, kind) for every state tensor, in module_state order."""
    owners = {}
    for path, m in module.named_modules():
        for attr in m._parameters:
            owners.setdefault(f"{path}.{attr}" if path else attr, (m, attr, "_parameters"))
        for attr in m._buffers:
            owners.setdefault(f"{path}.{attr}" if path else attr, (m, attr, "_buffers"))
    return [(name,) + owners[name] for name, _ in capture_mod.module_state(module)]


class CompiledModule:
    """A module or function whose calls run as tracecache graphs (see the module docstring)."""

    def __init__(self, target, name=None, version=None):
        import tracecache
        self._tc = tracecache
        self.target = target
        self.is_module = isinstance(target, torch.nn.Module)
        if self.is_module:
            self._accessors = _state_accessors(target)
            state = [(n, getattr(m, kind)[a]) for n, m, a, kind in self._accessors]
            self.state_names = [n for n, *_ in self._accessors]
            default_name = f"tracecache.torch:{type(target).__module__}.{type(target).__qualname__}"
            default_version = module_version(target, state)
        else:
            self._accessors = []
            self.state_names = []
            code = getattr(target, "__code__", None)
            qual = getattr(target, "__qualname__", type(target).__qualname__)
            default_name = f"tracecache.torch:{qual} ({code.co_filename if code else type(target).__module__})"
            default_version = function_version(target)
        self.name = name or default_name
        self._base_version = str(version) if version is not None else default_version
        self._modules = list(target.modules()) if self.is_module else []
        self._flags = None
        self.version = None
        self._wrappers = {}
        self._captures = {}
        self._call_inputs = None
        self._compiled = None
        self._compiled_key = None
        self._structures = {}
        self._count = 0
        self._warned = False

    # -- arguments -------------------------------------------------------------------------

    def _state(self):
        return [getattr(m, kind)[a] for _, m, a, kind in self._accessors]

    def _wrap_state(self, tensors):
        """tracecache tensors of the state, reusing a wrapper while the torch tensor is the same
        object with the same version (the wrapper shares its memory)."""
        cache, fresh = self._wrappers, {}
        out = []
        for t in tensors:
            entry = cache.get(id(t))
            if entry is None or entry[0] is not t or entry[1] != t._version:
                entry = (t, t._version, self._tc.from_torch(t))
            fresh[id(t)] = entry
            out.append(entry[2])
        self._wrappers = fresh
        return out

    def _check_inputs(self, inputs):
        for k, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"tracecache.torch: argument {k} is {type(t).__name__}; a compiled module "
                                f"takes torch tensors (positional)")
            if t.dtype not in TORCH_DTYPES:
                raise TypeError(f"tracecache.torch: argument {k} has dtype {t.dtype}; tracecache holds "
                                f"float32, int64, int32 and bool")

    # -- capture and lowering ----------------------------------------------------------------

    def _signature(self, state, inputs):
        return tuple((t.dtype, tuple(t.shape)) for t in list(state) + list(inputs)) + \
            ((self.target.training,) if self.is_module else ())

    def _capture(self, state, inputs):
        key = self._signature(state, inputs)
        graph = self._captures.get(key)
        if graph is None:
            input_names = [f"input{i}" for i in range(len(inputs))]
            if self.is_module:
                # Buffers are captured on copies: a forward that writes them (a training-mode batch
                # norm) must not change the module during the capture. Parameters are only read.
                tensors = [t if isinstance(t, torch.nn.Parameter) else t.detach().clone() for t in state]
                graph = capture_mod.capture_module(self.target, list(inputs), input_names,
                                                   list(zip(self.state_names, tensors)))
            else:
                graph = capture_mod.capture(self.target, [], [], input_names, list(inputs))
            self._captures[key] = graph
        return graph

    def _emitter(self):
        return LiveEmitter(self._tc)

    def _count_lowering(self):
        global _lowerings
        _lowerings += 1

    def _updates(self, count):
        """(output, argument) pairs of outputs that replace arguments: none for inference."""
        return []

    def _lower(self, graph, handles):
        lowered = lower(graph.graph, self._emitter(), handles)
        self._count_lowering()
        if lowered.updates:
            names = ", ".join(graph.names[i] for i in sorted(lowered.updates))
            raise CaptureError(f"tracecache.torch: the module modifies {names} in place (a training-mode "
                               f"batch norm?); compile runs a module as a pure function: call module.eval(), "
                               f"use tracecache.torch.compile_step(model, model) to write the new values back, "
                               f"or compile the whole training step with compile_step(step, model, optimizer)")
        tensors, constants = split_outputs(lowered.outputs, "output {}")
        return tensors, lowered.out_spec, constants

    def _traced(self, *proxies):
        """The body of the tracecache.compile'd function: runs only when tracecache traces."""
        state, inputs = self._call_inputs
        for k, (p, t) in enumerate(zip(proxies, list(state) + list(inputs))):
            if tuple(p.shape) != tuple(t.shape) or p.dtype != TORCH_DTYPES[t.dtype]:
                raise CaptureError(f"tracecache.torch: argument {k} is {p.dtype}{list(p.shape)} in the trace "
                                   f"but {t.dtype}{list(t.shape)} in torch")
        graph = self._capture(state, inputs)
        tensors, spec, constants = self._lower(graph, proxies)
        self._structures[self._signature(state, inputs)] = (spec, constants)
        note = _structure_note(spec, constants)
        if note is not None:
            self._compiled.set_note(note)
        return tuple(tensors)

    def _input_names(self, count):
        """Names of the call's inputs for recompile reasons: the forward's parameter names."""
        fn = self.target.forward if self.is_module else self.target
        try:
            params = [p.name for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        return [params[k] if k < len(params) else f"input{k}" for k in range(count)]

    def _traced_signature(self, count):
        """The traced function's signature, so tracecache names its arguments in recompile
        reasons (`input 4 'x'`): the state names with dots as underscores, then the inputs."""
        names, taken = [], set()
        for raw in [n.replace(".", "_") for n in self.state_names] + self._input_names(count):
            name = raw if raw.isidentifier() else f"arg_{raw}"
            while name in taken:
                name += "_"
            taken.add(name)
            names.append(name)
        return inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])

    def _compiled_function(self, settings=None, count=None):
        """The tracecache.compile'd function for the current session settings, training flags
        (a module switched between train() and eval() is another graph: another version) and
        number of inputs."""
        settings = settings or self._tc.settings()
        flags = tuple(m.training for m in self._modules)
        count = self._count if count is None else count
        key = (settings.get("db"), settings.get("no_cache"), settings.get("backend"), flags, count)
        if self._compiled is None or self._compiled_key != key:
            if flags != self._flags:
                digest = hashlib.sha256(f"{self._base_version}{flags}".encode()).hexdigest()[:32]
                self.version = digest if self.is_module else self._base_version
                self._flags = flags
            self._structures = {}

            def traced(*proxies):
                return self._traced(*proxies)
            traced.__signature__ = self._traced_signature(count)
            self._count = count
            self._compiled = self._tc.compile(traced, name=self.name, version=self.version,
                                              automatic_dynamic=False, updates=self._updates(count))
            self._compiled_key = key
        return self._compiled

    # -- calls -------------------------------------------------------------------------------

    def __call__(self, *inputs):
        self._check_inputs(inputs)
        if self.is_module and self.target.training and not self._warned and torch.is_grad_enabled():
            self._warn_no_autograd()
        state = self._state()
        settings = self._tc.settings()
        if settings.get("mode") != "once":
            return self._call_lazy(state, inputs)
        return self._assemble(*self._call_once(settings, state, inputs))

    def _call_once(self, settings, state, inputs):
        """Once mode: calls the compiled function (it captures only when it must trace);
        returns its outputs as a tuple with the output structure and constants."""
        compiled = self._compiled_function(settings, len(inputs))
        args = self._wrap_state(state) + [self._tc.from_torch(t) for t in inputs]
        self._call_inputs = (state, inputs)
        try:
            out = compiled(*args)
        finally:
            self._call_inputs = None
        out = out if isinstance(out, tuple) else (out,)
        spec, constants = self._known_structure(state, inputs, len(out))
        return out, spec, constants

    def _warn_no_autograd(self):
        self._warned = True
        if any(p.requires_grad for p in self.target.parameters()):
            warnings.warn("tracecache.torch.compile: the outputs of a compiled module carry no autograd history, so "
                          "loss.backward() cannot reach the parameters; to train, compile the whole step (forward, "
                          "backward, optimizer) with tracecache.torch.compile_step(step, model, optimizer)",
                          stacklevel=3)

    def _known_structure(self, state, inputs, tensors):
        """(spec, constants) of the call's outputs, `tensors` of which the graphs returned."""
        sig = self._signature(state, inputs)
        known = self._structures.get(sig)
        if known is None:
            known = _structure_from_note(self._compiled.last_note)
            if known is not None and sum(c is None for c in known[1]) != tensors:
                known = None  # a note that does not fit the entry's outputs (untrusted)
        if known is None:
            # Served by a stored entry without a usable note (a structure with no JSON form, or
            # a damaged note): capture once more to learn it.
            graph = self._capture(state, inputs)
            known = self._structure(graph)
        self._structures[sig] = known
        return known

    def _structure(self, graph):
        output = next(n for n in graph.graph.graph.nodes if n.op == "output")
        leaves, spec = output_structure(output.args[0])
        return spec, [None if isinstance(v, torch.fx.Node) else v for v in leaves]

    def _assemble(self, tensors, spec, constants):
        it = iter(tensors)
        leaves = [next(it).torch() if c is None else c for c in constants]
        return pytree.tree_unflatten(leaves, spec)

    def _call_lazy(self, state, inputs):
        graph = self._capture(state, inputs)
        handles = self._wrap_state(state) + [self._tc.from_torch(t) for t in inputs]
        tensors, spec, constants = self._lower(graph, handles)
        self._tc.mark_step()
        return self._assemble(tensors, spec, constants)

    # -- introspection -----------------------------------------------------------------------

    def stats(self):
        """The compiled function's counters (tracecache.CompiledFunction.stats()), once mode."""
        return self._compiled_function().stats()

    def recompile_reasons(self):
        return self._compiled_function().recompile_reasons()


def compile(module_or_fn, *, name=None, version=None):
    """A callable that runs `module_or_fn` (a `torch.nn.Module` or a function of torch tensors)
    as tracecache graphs and returns torch tensors in the same structure. `name` and `version`
    override the persistent key of its compiled function (by default computed from the module's
    code, attributes and state types, never by capturing)."""
    if not callable(module_or_fn):
        raise TypeError("tracecache.torch.compile takes a torch.nn.Module or a function")
    return CompiledModule(module_or_fn, name=name, version=version)
