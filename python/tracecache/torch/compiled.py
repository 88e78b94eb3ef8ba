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
import keyword
import os
import re
import sys
import warnings

import torch
from torch.utils import _pytree as pytree

from .. import _feed_code
from . import capture as capture_mod
from . import fallback
from . import specialize
from .lowerings import random_ops
from .emit_live import LiveEmitter
from .errors import CaptureError, skipped_file
from .lowering import TORCH_DTYPES, lower, output_structure

__all__ = ["CompiledModule", "compile", "stats", "mark_dynamic", "mark_static"]

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


def _structure_note(spec, constants, breaks=()):
    """What a compiled call's caller must know that its graphs do not hold, as the compiled
    function's entry note (JSON): the output structure, any number outputs, and the graph breaks
    of the trace (for graph_breaks() in a process that never traced). None when the structure has
    no JSON form (then a new process captures once to learn it)."""
    encoded = _spec_to_json(spec)
    if encoded is None:
        return None
    try:
        return json.dumps({"spec": encoded, "constants": constants,
                           "breaks": [list(b) for b in breaks]}).encode()
    except (TypeError, ValueError):
        return None


def _structure_from_note(note):
    """(spec, constants) from an entry note, or None when there is none or it is malformed
    (notes come from the cache: untrusted)."""
    known = _note(note)
    return None if known is None else (known[0], known[1])


def _note(note):
    """(spec, constants, breaks) from an entry note, or None (see _structure_from_note)."""
    if not note:
        return None
    try:
        data = json.loads(note.decode())
        spec, constants = _spec_from_json(data["spec"]), data["constants"]
        breaks = data.get("breaks", [])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(constants, list) or len(constants) != spec.num_leaves or \
            not all(c is None or isinstance(c, (bool, int, float)) for c in constants):
        return None
    if not isinstance(breaks, list) or not all(isinstance(b, list) and len(b) == 3 and
                                               all(x is None or isinstance(x, str) for x in b) for b in breaks):
        return None
    return spec, constants, [tuple(b) for b in breaks]


# -- arguments -------------------------------------------------------------------------------

_PLAIN = (type(None), bool, int, float, str)


def _dtype_message(what, dtype):
    return (f"tracecache.torch: {what} has dtype {dtype}; tracecache holds float32, float64, bfloat16, "
            f"float16, int64, int32, int16, int8, uint8 and bool: convert it first "
            f"({'.float()' if dtype.is_floating_point or dtype.is_complex else '.long()'})")


def _flatten_call(args, kwargs):
    """A call's arguments as (tensor leaves, the key of everything else): pytree structure and
    the plain values (numbers, strings, None) that the capture bakes in. TypeError for a leaf
    that is neither."""
    flat, spec = pytree.tree_flatten((args, kwargs))
    tensors, plain = [], []
    for k, v in enumerate(flat):
        if isinstance(v, torch.Tensor):
            if v.dtype not in TORCH_DTYPES:
                raise TypeError(_dtype_message(f"argument {k}", v.dtype))
            tensors.append(v)
        elif isinstance(v, _PLAIN):
            plain.append((k, v))
        else:
            raise TypeError(f"tracecache.torch: argument {k} is {type(v).__name__}; a compiled module takes "
                            f"torch tensors, numbers, strings and None, in tuples, lists and dicts")
    return flat, spec, tensors, (repr(spec), tuple(plain))


def _rebuild(flat, spec, tensors):
    """(args, kwargs) of a call with its tensor leaves replaced by `tensors`, in order."""
    it = iter(tensors)
    leaves = [next(it) if isinstance(v, torch.Tensor) else v for v in flat]
    return pytree.tree_unflatten(leaves, spec)


def _draws_random(graph):
    """Whether a capture has ops that draw random numbers (training-mode dropout, rand*)."""
    return any(n.op == "call_function" and str(n.target) in random_ops.RANDOM_OPS for n in graph.graph.graph.nodes)


def _identifier(name):
    ident = re.sub(r"\W", "_", name)
    return ident if ident.isidentifier() and not keyword.iskeyword(ident) else f"arg_{ident}"


def _user_stacklevel():
    """The stacklevel that points a warning raised here at the first frame outside tracecache and
    torch (the user's call)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and skipped_file(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def warn(message, category=UserWarning):
    """warnings.warn at the user's line."""
    warnings.warn(message, category, stacklevel=_user_stacklevel())


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


_BRIDGE = []


def _torch_bridge():
    """The torch bridge's capsule (_tracecache_torch.api, python/torch_bridge/torch_bridge.h), or
    None when it is not built or was built against another torch: then every call takes the
    Python path."""
    if not _BRIDGE:
        try:
            from tracecache import _tracecache_torch
            _BRIDGE.append(_tracecache_torch.api)
        except ImportError:
            _BRIDGE.append(None)
    return _BRIDGE[0]


class _Function:
    """One tracecache.compile'd function of a CompiledModule: the calls of one argument
    structure (pytree and plain values) under one set of training flags."""

    def __init__(self, compiled, version):
        self.compiled = compiled
        self.version = version
        self.structures = {}  # signature -> (spec, constants, breaks), this process
        self.marks = {}  # (argument position, dim) -> dynamic (True) or static (False), as applied
        self.dynamic_inputs = set()  # (input index, dim) marked dynamic


class CompiledModule:
    """A module or function whose calls run as tracecache graphs (see the module docstring)."""

    # Whether a new size may be served by rewriting a kept capture (specialize.py) instead of
    # capturing again: inference only (a training step's graph reads its shapes everywhere).
    _allow_respecialize = True

    def __init__(self, target, name=None, version=None, fullgraph=False, mode=None, dynamic=None):
        import tracecache
        if mode not in (None, "once", "lazy"):
            raise ValueError(f"tracecache.torch.compile: mode must be 'once' (the default) or 'lazy', not {mode!r}")
        if dynamic not in (None, True, False):
            raise ValueError(f"tracecache.torch.compile: dynamic must be None (automatic), True or False, not {dynamic!r}")
        self._tc = tracecache
        self.target = target
        self.fullgraph = bool(fullgraph)
        self.mode = mode or "once"
        self.dynamic = dynamic
        self.is_module = isinstance(target, torch.nn.Module)
        if self.is_module:
            self._accessors = _state_accessors(target)
            state = [(n, getattr(m, kind)[a]) for n, m, a, kind in self._accessors]
            for n, t in state:
                if t.dtype not in TORCH_DTYPES:
                    raise TypeError(_dtype_message(f"parameter or buffer '{n}'", t.dtype))
            self.state_names = [n for n, *_ in self._accessors]
            forward = type(target).forward
            default_name = f"{type(target).__module__}:{getattr(forward, '__qualname__', type(target).__qualname__)}"
            self.program = type(target).__module__
            default_version = module_version(target, state)
        else:
            self._accessors = []
            self.state_names = []
            default_name = tracecache.default_name(target)
            self.program = getattr(target, "__module__", None) or type(target).__module__
            default_version = function_version(target)
        self.name = name or default_name
        self._base_version = str(version) if version is not None else default_version
        self._modules = list(target.modules()) if self.is_module else []
        self._wrappers = {}
        self._captures = {}
        self._functions = {}
        self._session = None
        self._session_object = None
        self._call = None
        self._last = None
        self._slow_breaks = []
        self._warned = False
        self._validate = None
        self._no_respecialize = set()
        self._fast = None           # tracecache._TorchFastPath of the last function, or None
        self._fast_call = None      # its caller(): call(*inputs) without pybind11's dispatch
        self._fast_function = None
        self._last_known = None
        self.version = None

    # -- arguments -------------------------------------------------------------------------

    def _state(self):
        return [getattr(m, kind)[a] for _, m, a, kind in self._accessors]

    def _wrap_state(self, tensors):
        """tracecache tensors of the state, reusing a wrapper while the torch tensor is the same
        object over the same memory and layout with the same version (the wrapper shares its
        memory; `p.data = t` keeps the object and version but not the memory)."""
        cache, fresh = self._wrappers, {}
        out = []
        for t in tensors:
            entry = cache.get(id(t))
            seen = (t._version, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
            if entry is None or entry[0] is not t or entry[1] != seen:
                if t.dtype not in TORCH_DTYPES:
                    raise TypeError(_dtype_message("a parameter or buffer", t.dtype))
                entry = (t, seen, self._tc.from_torch(t))
            fresh[id(t)] = entry
            out.append(entry[2])
        self._wrappers = fresh
        return out

    def _flags(self):
        return tuple(m.training for m in self._modules)

    # -- capture and lowering ----------------------------------------------------------------

    def _signature(self, state, tensors, key):
        return (key, tuple((t.dtype, tuple(t.shape)) for t in list(state) + list(tensors)), self._flags())

    def _capture(self, state, flat, spec, tensors, key):
        """The captured graph of this call: kept per signature, unless it read values (then it
        holds for this call's values only)."""
        sig = self._signature(state, tensors, key)
        graph = self._captures.get(sig)
        if graph is None:
            graph = self._capture_now(state, flat, spec, tensors)
            if not graph.data_dependent:
                self._captures[sig] = graph
        return graph

    def _capture_now(self, state, flat, spec, tensors):
        input_names = [f"input{i}" for i in range(len(tensors))]
        if self.is_module:
            # Buffers are captured on copies: a forward that writes them (a training-mode batch
            # norm) must not change the module during the capture. Parameters are only read.
            copies = [t if isinstance(t, torch.nn.Parameter) else t.detach().clone() for t in state]
            return capture_mod.capture_module(self.target, list(tensors), input_names,
                                              list(zip(self.state_names, copies)),
                                              rebuild=lambda ts: _rebuild(flat, spec, ts))
        target = self.target

        def call(*ts):
            args, kwargs = _rebuild(flat, spec, ts)
            return target(*args, **kwargs)
        return capture_mod.capture(call, [], [], input_names, list(tensors))

    def _count_lowering(self):
        global _lowerings
        _lowerings += 1

    def _updates(self, count):
        """(output, argument) pairs of outputs that replace arguments: none for inference."""
        return []

    def _lower(self, graph, handles, emitter, seed):
        """Lowers a capture onto `handles` (random ops draw from the `seed` handle): (tensor
        handles, output spec, constants, breaks)."""
        lowered = lower(graph.graph, emitter, handles, breaks=not self.fullgraph, seed=seed)
        self._count_lowering()
        if lowered.updates:
            names = ", ".join(graph.names[i] for i in sorted(lowered.updates))
            raise CaptureError(f"tracecache.torch: the module modifies {names} in place (a training-mode "
                               f"batch norm?); compile runs a module as a pure function: call module.eval(), "
                               f"use tracecache.torch.compile_step(model, model) to write the new values back, "
                               f"or compile the whole training step with compile_step(step, model, optimizer)")
        tensors, constants = split_outputs(lowered.outputs, "output {}")
        return tensors, lowered.out_spec, constants, lowered.breaks

    def _respecialized(self, state, flat, spec, tensors, key):
        """A kept capture of this call structure at other sizes, rewritten for this call's
        (specialize.py), with the capture it came from; None when there is none or it cannot be
        rewritten."""
        sig = self._signature(state, tensors, key)
        if not self._allow_respecialize or self.dynamic is False or sig in self._no_respecialize:
            return None
        for other_sig, base in self._captures.items():
            if other_sig[0] != sig[0] or other_sig[2] != sig[2] or len(other_sig[1]) != len(sig[1]):
                continue
            if _draws_random(base):  # its check against eager could not pass: capture instead
                continue
            if any(a[0] != b[0] or len(a[1]) != len(b[1]) for a, b in zip(other_sig[1], sig[1])):
                continue
            try:
                gm, _ = specialize.respecialize(base.graph, base.names, [s for _, s in sig[1]])
            except specialize.Unspecializable:
                continue
            return capture_mod.Capture(gm, base.names, base.num_state), base
        return None

    def _probe(self, graph, function):
        """For a first trace with dims marked dynamic: the capture rewritten at other sizes of
        those dims (each size s as 2s + 1), the shadow that tells the lowering which attributes
        follow them; None when it cannot be rewritten."""
        if not function.dynamic_inputs:
            return None
        placeholders = [n for n in graph.graph.graph.nodes if n.op == "placeholder"]
        shapes = [list(n.meta["tensor_meta"].shape) for n in placeholders]
        for i, d in function.dynamic_inputs:
            k = graph.num_state + i
            if k < len(shapes) and d < len(shapes[k]):
                shapes[k][d] = shapes[k][d] * 2 + 1
        try:
            gm, _ = specialize.respecialize(graph.graph, graph.names, shapes)
        except specialize.Unspecializable:
            return None
        return capture_mod.Capture(gm, graph.names, graph.num_state)

    def _lower_with_shadow(self, graph, shadow, proxies, seed):
        """Lowers `graph` onto the trace's proxies, binding the attributes that differ from the
        lowering of `shadow` (the same program at other sizes) to the dims they follow; when one
        cannot be explained, reads the inputs' shapes so tracecache keeps the entry static."""
        shadow_emitter = specialize.ShadowEmitter()
        shadow_inputs = []
        for n in shadow.graph.graph.nodes:
            if n.op == "placeholder":
                h = specialize._Shadow()
                h.shape = tuple(n.meta["tensor_meta"].shape)
                shadow_inputs.append(h)
        lower(shadow.graph, shadow_emitter, shadow_inputs, breaks=not self.fullgraph, seed=specialize._Shadow())
        binder = specialize.BindingEmitter(LiveEmitter(self._tc, traced=True), shadow_emitter.ops,
                                           [(p, h.shape) for p, h in zip(proxies, shadow_inputs)])
        result = self._lower(graph, proxies, binder, seed)
        binder.finish()
        if binder.unexplained:
            for p in proxies:
                p.shape  # noqa: B018 (noted as read: tracecache keeps this entry's dims static)
        return result

    def _traced(self, function, *arguments):
        """The body of a tracecache.compile'd function: runs only when tracecache traces. Its
        arguments are the state's and the call's tensors, then the random seed."""
        proxies, seed = arguments[:-1], arguments[-1]
        state, flat, spec, tensors, key = self._call
        sig = self._signature(state, tensors, key)
        graph, shadow = self._captures.get(sig), None
        if graph is None:
            found = self._respecialized(state, flat, spec, tensors, key)
            if found is not None:
                graph, shadow = found
                self._validate = (function, sig)
        if graph is None:
            graph = self._capture(state, flat, spec, tensors, key)
            if not graph.data_dependent:
                shadow = self._probe(graph, function)
        if shadow is not None:
            out, out_spec, constants, breaks = self._lower_with_shadow(graph, shadow, proxies, seed)
        else:
            out, out_spec, constants, breaks = self._lower(graph, proxies, LiveEmitter(self._tc, traced=True), seed)
        function.structures[self._signature(state, tensors, key)] = (out_spec, constants, breaks)
        note = _structure_note(out_spec, constants, breaks)
        if note is not None:
            function.compiled.set_note(note)
        return tuple(out)

    def _argument_names(self):
        """The names of the state arguments, in order."""
        return self.state_names

    def _traced_signature(self, count):
        """The traced function's signature, so tracecache names its arguments in recompile
        reasons (`input 4 'x'`): the state names as identifiers, then the inputs."""
        names, taken = [], set()
        for raw in [n.replace(".", "_") for n in self._argument_names()] + [f"input{k}" for k in range(count)]:
            name = _identifier(raw)
            while name in taken:
                name += "_"
            taken.add(name)
            names.append(name)
        names.append(_identifier("random_seed") if "random_seed" not in taken else "random_seed_")
        return inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])

    def _function(self, key, count):
        """The tracecache.compile'd function for this call structure and training flags, in the
        current session (a new session makes them anew)."""
        session = self._tc.settings()
        session_key = (session.get("db"), session.get("no_cache"), session.get("backend"))
        if session_key != self._session or self._session_object != self._tc._tracecache._session_token():
            self._functions = {}
            self._wrappers = {}  # tensors of the old session's context
            self._fast = self._fast_call = self._fast_function = None
            self._session = session_key
            self._session_object = self._tc._tracecache._session_token()
        flags = self._flags()
        fkey = (key, flags, count)
        function = self._functions.get(fkey)
        if function is None:
            h = hashlib.sha256(f"{self._base_version}{flags}{key}".encode())
            version = h.hexdigest()[:32]

            def traced(*proxies):
                return self._traced(function, *proxies)
            traced.__signature__ = self._traced_signature(count)
            compiled = self._tc.compile(traced, name=self.name, version=version,
                                        automatic_dynamic=self._allow_respecialize and self.dynamic is not False,
                                        updates=self._updates(count), host_op=fallback.run,
                                        program=self.program)
            function = _Function(compiled, version)
            self._functions[fkey] = function
        self.version = function.version
        return function

    # -- calls -------------------------------------------------------------------------------

    def _check_backend_dtypes(self, tensors, state):
        """TypeError, naming the argument or state tensor and what to do, for a float64 tensor
        when the session's backend is cpu or sim: their kernels compute bf16, f16 and the small
        integers widened, but have no float64 kernels (the reference evaluator has)."""
        backend = self._tc.settings().get("backend")
        if backend == "reference":
            return
        named = [(f"argument {k}", t) for k, t in enumerate(tensors)]
        named += [(f"{'parameter' if isinstance(t, torch.nn.Parameter) else 'buffer'} '{n}'", t)
                  for n, t in zip(self.state_names, state)] if self.is_module else []
        for what, t in named:
            if t.dtype == torch.float64:
                raise TypeError(f"tracecache.torch: {what} has dtype torch.float64, which the "
                                f"'{backend}' backend does not compute: convert it "
                                f"first (.float()), or run on the reference evaluator "
                                f"(tracecache.configure(backend=\"reference\"))")

    def _per_call(self):
        """Whether calls lower the capture each time (lazy capture, asked for, or a session that
        does not compile: eager mode, the reference evaluator) instead of trace once."""
        if self.mode == "lazy":
            return True
        settings = self._tc.settings()
        return settings.get("mode") == "eager" or settings.get("backend") == "reference"

    def __call__(self, *args, **kwargs):
        fast = self._fast_call
        if fast is not None and not kwargs:
            r = fast(*args)
            if r is not None:  # replayed in C++
                if type(r) is not tuple:
                    return r  # the entry's one output
                known, outs, note = r
                if known is None:
                    return self._fast_unknown(self._fast, note, outs, args)
                it = iter(outs)
                return pytree.tree_unflatten([next(it) if c is None else c for c in known[1]], known[0])
        flat, spec, tensors, key = _flatten_call(args, kwargs)
        if self.is_module and self.target.training and not self._warned and torch.is_grad_enabled():
            self._warn_no_autograd()
        state = self._state()
        self._check_backend_dtypes(tensors, state)
        if self._per_call():
            return self._assemble(*self._call_lazy(state, flat, spec, tensors, key)[:3])
        out, out_spec, constants = self._call_once(state, flat, spec, tensors, key)
        if not kwargs and len(tensors) == len(args) and self._allow_fast:
            self._keep_fast(len(tensors))
        return self._assemble(out, out_spec, constants)

    # A CompiledStep writes state back after each call: it has no fast path.
    _allow_fast = True

    @property
    def _last_breaks(self):
        """The graph breaks of the entry that served the last call (the C++ path's, if it did)."""
        known = self._fast.last_structure() if self._fast is not None else None
        return list(known[2]) if known is not None else self._slow_breaks

    @_last_breaks.setter
    def _last_breaks(self, breaks):
        self._slow_breaks = breaks
        if self._fast is not None:
            self._fast.clear_last()

    def _keep_fast(self, count):
        """After a once-mode call of plain positional tensors: the C++ per-call path for the
        function that served it (when the torch bridge is built), and its entry's output
        structure by note."""
        function = self._last
        bridge = _torch_bridge()
        if bridge is None:
            return
        if self._fast_function is not function:
            index = {id(m): i for i, m in enumerate(self._modules)}
            modules = [(m, m.training) for m in self._modules]
            slots = [(index[id(m)], kind, a) for _, m, a, kind in self._accessors]
            try:
                self._fast = self._tc._tracecache._TorchFastPath(function.compiled._core, modules, slots, count,
                                                                  self._tc.from_torch, bridge)
                self._fast_call = self._fast.caller()
            except TypeError:
                # a module without an instance dictionary, or a Python without dictionary
                # version tags: the Python path serves
                self._fast = self._fast_call = None
            self._fast_function = function
        note = function.compiled.last_note
        if self._fast is not None and note and self._last_known is not None:
            self._learn(self._fast, bytes(note), self._last_known)

    @staticmethod
    def _learn(fast, note, known):
        count = sum(c is None for c in known[1])
        single = len(known[1]) == 1 and known[1][0] is None and isinstance(known[0], pytree.LeafSpec)
        fast.learn(note, known, count, single)

    def _fast_unknown(self, fast, note, outs, args):
        """A C++ replay whose entry's structure this process has not seen: from its note, else
        learned by capturing once (as the Python path does)."""
        known = _note(note)
        if known is None or sum(c is None for c in known[1]) != len(outs):
            flat, spec, tensors, key = _flatten_call(args, {})
            known = self._structure(self._capture(self._state(), flat, spec, tensors, key)) + ([],)
        self._learn(fast, bytes(note), known)
        self._last_breaks = list(known[2])
        it = iter(outs)
        return pytree.tree_unflatten([next(it) if c is None else c for c in known[1]], known[0])

    def _call_once(self, state, flat, spec, tensors, key, skip=0):
        """Once mode: calls the compiled function (it captures only when it must trace); returns
        its outputs as a tuple with the output structure and constants. The first `skip` outputs
        are not the user's (a training step's new state)."""
        function = self._function(key, len(tensors))
        self._apply_marks(function, len(state), tensors)
        args = self._wrap_state(state) + [self._tc.from_torch(t) for t in tensors] + \
            [self._tc.from_numpy(self._tc.next_seed())]
        self._call = (state, flat, spec, tensors, key)
        self._validate = None
        try:
            out = function.compiled(*args)
        finally:
            self._call = None
        out = out if isinstance(out, tuple) else (out,)
        self._last = function
        out_spec, constants = self._known_structure(function, state, flat, spec, tensors, key, len(out) - skip)
        if self._validate is not None and not self._specialization_holds(out, out_spec, constants, flat, spec):
            # The rewritten graph is wrong at this size: drop its entry, keep the dims static and
            # capture this call for real.
            function.compiled._core._discard_last_entry("the graph rewritten for the new sizes differs from eager "
                                                         "PyTorch; the call is captured again")
            self._no_respecialize.add(self._validate[1])
            function.structures.pop(self._validate[1], None)
            for i, t in enumerate(tensors):
                for d in range(t.dim()):
                    function.compiled._core._mark_dim(len(state) + i, d, False)
            return self._call_once(state, flat, spec, tensors, key, skip)
        return out, out_spec, constants

    def _apply_marks(self, function, num_state, tensors):
        """Marks of this call's tensors (tracecache.torch.mark_dynamic / mark_static, and every dim
        with dynamic=True) on the compiled function, each once."""
        for i, t in enumerate(tensors):
            marks = {}
            if self.dynamic is True:
                marks.update({d: True for d in range(t.dim())})
            marks.update({d: True for d in getattr(t, "_tracecache_dynamic", ())})
            marks.update({d: False for d in getattr(t, "_tracecache_static", ())})
            for d, dynamic in marks.items():
                if d >= t.dim() or function.marks.get((num_state + i, d)) == dynamic:
                    continue
                function.compiled._core._mark_dim(num_state + i, d, dynamic)
                function.marks[(num_state + i, d)] = dynamic
                if dynamic:
                    function.dynamic_inputs.add((i, d))
                else:
                    function.dynamic_inputs.discard((i, d))

    def _specialization_holds(self, out, out_spec, constants, flat, spec):
        """Whether a call served by a graph rewritten for new sizes equals eager PyTorch (checked
        once per rewrite: later sizes replay the template it made)."""
        got = pytree.tree_flatten(self._assemble(out, out_spec, constants))[0]
        args, kwargs = _rebuild(flat, spec, [t for t in flat if isinstance(t, torch.Tensor)])
        # With gradients enabled, as the capture ran: PyTorch's fused no-grad paths (the nested-tensor
        # encoder) differ from the composite ones at padded positions.
        with torch.enable_grad():
            want = [w.detach() if isinstance(w, torch.Tensor) else w
                    for w in pytree.tree_flatten(self.target(*args, **kwargs))[0]]
        if len(got) != len(want):
            return False
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
                return False
            if not isinstance(w, torch.Tensor):
                if g != w:
                    return False
                continue
            if g.shape != w.shape or g.dtype != w.dtype:
                return False
            if w.numel() and w.is_floating_point():
                scale = w.abs().max().item() or 1.0
                if (g.double() - w.double()).abs().max().item() > 1e-3 * scale:
                    return False
            elif not torch.equal(g, w):
                return False
        return True

    def _warn_no_autograd(self):
        self._warned = True
        if any(p.requires_grad for p in self.target.parameters()):
            warn("tracecache.torch.compile: the outputs of a compiled module carry no autograd history, so "
                 "loss.backward() cannot reach the parameters; to train, compile the whole step (forward, "
                 "backward, optimizer) with tracecache.torch.compile_step(step, model, optimizer)")

    def _known_structure(self, function, state, flat, spec, tensors, key, count):
        """(spec, constants) of the call's outputs, `count` of which are tensors the graphs
        returned; also sets the breaks of the entry that served the call."""
        sig = self._signature(state, tensors, key)
        known = function.structures.get(sig)
        if known is None:
            known = _note(function.compiled.last_note)
            if known is not None and sum(c is None for c in known[1]) != count:
                known = None  # a note that does not fit the entry's outputs (untrusted)
        if known is None:
            # Served by a stored entry without a usable note (a structure with no JSON form, or
            # a damaged note): capture once more to learn it.
            graph = self._capture(state, flat, spec, tensors, key)
            known = self._structure(graph) + ([],)
        function.structures[sig] = known
        self._last_breaks = list(known[2])
        self._last_known = known
        return known[0], known[1]

    def _structure(self, graph):
        output = next(n for n in graph.graph.graph.nodes if n.op == "output")
        leaves, spec = output_structure(output.args[0])
        return spec, [None if isinstance(v, torch.fx.Node) else v for v in leaves]

    def _assemble(self, tensors, spec, constants):
        it = iter(tensors)
        leaves = [next(it).torch() if c is None else c for c in constants]
        return pytree.tree_unflatten(leaves, spec)

    def _call_lazy(self, state, flat, spec, tensors, key):
        """Lazy capture: the (kept) capture lowered onto new lazy tensors, run at a barrier."""
        graph = self._capture(state, flat, spec, tensors, key)
        handles = self._wrap_state(state) + [self._tc.from_torch(t) for t in tensors]
        seed = self._tc.from_numpy(self._tc.next_seed())
        out, out_spec, constants, breaks = self._lower(graph, handles, LiveEmitter(self._tc), seed)
        self._tc.mark_step()
        self._last_breaks = list(breaks)
        return out, out_spec, constants

    # -- introspection -----------------------------------------------------------------------

    def _last_function(self):
        if self._last is None:
            raise RuntimeError("tracecache.torch: the compiled module has not been called in once mode yet")
        return self._last

    def stats(self):
        """The counters of the compiled function of the last call (tracecache.CompiledFunction.stats(),
        once mode), with `graph_breaks`: the graph breaks of the entry that served it."""
        s = dict(self._last_function().compiled.stats())
        s["graph_breaks"] = len(self._last_breaks)
        return s

    def recompile_reasons(self):
        return self._last_function().compiled.recompile_reasons()

    def graph_breaks(self):
        """The graph breaks of the last call: (op, reason, where) per break, in order: an op
        PyTorch ran on the host, or a value read into Python (`where` is the user's line)."""
        return list(self._last_breaks)

    def flush(self):
        """Writes the hit counts of this process's replays to the cache (also done at exit)."""
        for function in self._functions.values():
            function.compiled.flush()


def mark_dynamic(t, dim):
    """Makes dim `dim` of tensor `t` dynamic in the compiled calls it is passed to (as
    torch._dynamo.mark_dynamic): the first trace already makes a graph that serves every size of it."""
    t._tracecache_dynamic = set(getattr(t, "_tracecache_dynamic", ())) | {int(dim)}
    t._tracecache_static = set(getattr(t, "_tracecache_static", ())) - {int(dim)}


def mark_static(t, dim):
    """Keeps dim `dim` of tensor `t` static in the compiled calls it is passed to: a new size of it
    traces (and captures) again instead of becoming dynamic."""
    t._tracecache_static = set(getattr(t, "_tracecache_static", ())) | {int(dim)}
    t._tracecache_dynamic = set(getattr(t, "_tracecache_dynamic", ())) - {int(dim)}


def compile(module_or_fn, *, name=None, version=None, fullgraph=False, mode=None, dynamic=None):
    """A callable that runs `module_or_fn` (a `torch.nn.Module` or a function of torch tensors)
    as tracecache graphs and returns torch tensors in the same structure. It traces once with
    guards (whatever the session's mode; `mode="lazy"` lowers the capture on every call
    instead). `name` and `version` override the persistent key of its compiled function (by
    default computed from the module's code, attributes and state types, never by capturing).
    `fullgraph=True` makes an op tracecache cannot map an error instead of a graph break.
    `dynamic`: None (a dim whose size changes becomes dynamic: served from the first capture,
    never capturing again), True (every dim of every input is dynamic from the first call), False
    (every new size traces and captures again)."""
    if not callable(module_or_fn):
        raise TypeError("tracecache.torch.compile takes a torch.nn.Module or a function")
    return CompiledModule(module_or_fn, name=name, version=version, fullgraph=fullgraph, mode=mode, dynamic=dynamic)
