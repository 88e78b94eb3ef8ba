"""tracecache from Python: lazy tensors, the op registry, trace-once compiled functions and the
graph cache (docs/python.md). The C++ core is the module `_tracecache` built beside this file."""
import atexit as _atexit
import contextlib as _contextlib
import hashlib as _hashlib
import inspect as _inspect
import types as _types

import os as _os

# The cpu backend's threads are libgomp's team, whose idle members spin by default and then
# take the cores the working ones need on a busy machine; as the `tracecache` command does,
# they sleep at once unless the user chose (docs/architecture.md, "The cpu backend: kernel libraries and threads"). libgomp
# reads this when it loads: if another module (PyTorch) loaded it first, its setting stays.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "passive"

# numpy loads the system's OpenBLAS (the pthreads build) under the soname the extension's OpenMP
# one has, so in Python that one computes the GEMMs (docs/architecture.md, "The cpu backend:
# kernel libraries and threads"): PyTorch, which may share this process, hangs in the OpenMP
# build (its sgemm waits for team members that never come).
import numpy as _np

from . import _tracecache
from ._tracecache import (Error, Tensor, op, op_names, mark_step, settings, counters,
                          metrics_report, timers, audit, report, flush, warnings, _host_op)

__all__ = ["Error", "Tensor", "CompiledFunction", "configure", "settings", "tensor", "from_numpy",
           "from_torch", "op", "ops", "op_names", "mark_step", "grad", "no_grad", "compile",
           "counters", "timers", "metrics_report", "audit", "report", "flush", "warnings", "manual_seed", "next_seed"]

_atexit.register(_tracecache._shutdown)


# tracecache's own random number generator (the `rand_uniform` / `rand_normal` registry ops):
# a seed and an offset, kept in the C++ module (the per-call path of tracecache.torch reads it
# too). Each use takes the next offset, so every step of a compiled program that draws numbers
# draws new ones, reproducibly from manual_seed(n), in every process.
def manual_seed(seed):
    """Seeds tracecache's random number generator (dropout and torch.rand* in compiled PyTorch
    code): the numbers drawn after manual_seed(n) are the same in every process and replay. They
    are tracecache's own (Philox4x32-10, docs/ops.md), not the numbers PyTorch's generator gives."""
    seed = int(seed)
    if not -(1 << 63) <= seed < (1 << 63):
        raise ValueError(f"manual_seed: {seed} does not fit in 64 bits")
    _tracecache._manual_seed(seed)


def next_seed():
    """The (seed, offset) pair for the next draw, as an int64 array of 2, advancing the offset."""
    return _tracecache._next_seed()


def configure(mode="lazy", backend="cpu", db=None, no_cache=False, threads=None, remote=None,
              remote_mode="read-write", remote_timeout_ms=None, remote_ttl=None, remote_backoff=None):
    """(Re)creates the process's session: mode "eager" | "lazy" | "once", a backend by registry
    name ("cpu", "reference", "sim:h100", ...), the cache database (None: $TRACECACHE_DB, else
    $XDG_CACHE_HOME/tracecache/cache.db, else ~/.cache/tracecache/cache.db), no_cache (compile in
    memory only), threads (None: $TRACECACHE_THREADS, else every CPU), and the shared remote tier
    (remote: "redis://HOST:PORT[/DB]" or "unix:///PATH.sock"; None: $TRACECACHE_REMOTE, else
    none; remote_mode "read-write" or "read-only"; remote_timeout_ms, remote_ttl (seconds; 0:
    never expire) and remote_backoff (seconds) as the CLI's --remote-timeout-ms, --remote-ttl and
    --remote-backoff, None: the CLI's defaults; docs/remote-cache.md). Tensors of the previous
    session stay valid but cannot be mixed with the new one's."""
    _tracecache.configure(mode=mode, backend=backend, db=None if db is None else str(db),
                          no_cache=no_cache, threads=threads, remote=remote, remote_mode=remote_mode,
                          remote_timeout_ms=remote_timeout_ms, remote_ttl=remote_ttl,
                          remote_backoff=remote_backoff)


# NumPy dtypes tracecache holds as they are; tensor()/from_numpy() convert the others.
_EXACT = {_np.dtype(_np.float32): "f32", _np.dtype(_np.int32): "i32", _np.dtype(_np.int64): "i64",
          _np.dtype(_np.bool_): "bool"}
_NUMPY_OF = {"f32": _np.float32, "i32": _np.int32, "i64": _np.int64, "bool": _np.bool_}


def _converted_dtype(dt):
    if dt in _EXACT:
        return dt
    if dt.kind == "f":
        return _np.dtype(_np.float32)
    if dt.kind in "iu" and dt.itemsize < 4:
        return _np.dtype(_np.int32)
    if dt.kind in "iu":
        return _np.dtype(_np.int64)
    raise TypeError(f"tracecache has no dtype for NumPy's {dt} (it holds f32, i32, i64 and bool)")


def from_numpy(a):
    """A tensor of `a`'s values. Zero-copy (the tensor views `a`'s memory and keeps `a` alive)
    when `a` is C-contiguous, aligned and float32, int32, int64 or bool; otherwise a contiguous
    copy, converted to f32 (floating), i32 (integers of 1 or 2 bytes) or i64 (other integers)."""
    if not isinstance(a, _np.ndarray):
        raise TypeError(f"from_numpy takes a numpy.ndarray, not {type(a).__name__}")
    want = _converted_dtype(a.dtype)
    if a.dtype != want or not (a.flags.c_contiguous and a.flags.aligned):
        a = _np.array(a, dtype=want, order="C")  # a copy (ascontiguousarray would make 0-d 1-d)
    return _tracecache._from_numpy_exact(a)


def tensor(data, dtype=None):
    """A tensor holding a copy of `data` (a number, nested lists, a NumPy array or a torch tensor).
    dtype: "f32", "i32", "i64" or "bool"; default: f32 for floating data, i64 for integers."""
    if type(data).__module__.startswith("torch"):
        data = data.detach().cpu().numpy()
    a = _np.array(data, copy=True)
    if dtype is not None:
        if dtype not in _NUMPY_OF:
            raise ValueError(f"dtype must be one of f32, i32, i64, bool, not {dtype!r}")
        a = a.astype(_NUMPY_OF[dtype])
    return from_numpy(a)


def from_torch(t):
    """A tensor of torch tensor `t`'s values (detached), of `t`'s dtype: float32, float64,
    bfloat16, float16, int64, int32, int16, int8, uint8 or bool (unlike from_numpy, nothing is
    converted; another dtype is a TypeError). Zero-copy for a contiguous, aligned CPU tensor (it
    keeps `t`'s storage alive); otherwise a contiguous copy."""
    import torch
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:  # NumPy has no bfloat16: its bit patterns, as int16
        return _tracecache._from_numpy_exact(_exact_array(t.view(torch.int16).numpy()), bf16_bits=True)
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    a = t.numpy()
    if a.dtype not in _HELD_EXACTLY:
        raise TypeError(f"tracecache has no dtype for torch's {t.dtype} (it holds float32, float64, bfloat16, "
                        f"float16, int64, int32, int16, int8, uint8 and bool)")
    return _tracecache._from_numpy_exact(_exact_array(a))


# The NumPy dtypes from_torch keeps as they are.
_HELD_EXACTLY = {_np.dtype(d) for d in (_np.float32, _np.float64, _np.float16, _np.int64, _np.int32, _np.int16,
                                        _np.int8, _np.uint8, _np.bool_)}


def _exact_array(a):
    """`a` itself when C-contiguous and aligned, else a C-contiguous copy of the same dtype."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    return _np.array(a, order="C")  # a copy (ascontiguousarray would make 0-d 1-d)


def _torch_of_array(a):
    """torch.from_numpy of a read-only array (tracecache's values), without torch's warning."""
    import torch
    import warnings as python_warnings
    with python_warnings.catch_warnings():
        python_warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


def _torch(self):
    """The value as a torch tensor sharing the tensor's host memory (no copy), of its dtype.
    tracecache values are immutable: clone it before writing to it in place."""
    if self.dtype == "bf16":
        import torch
        return _torch_of_array(self._numpy_bits()).view(torch.bfloat16)
    return _torch_of_array(self.numpy())


def _len(self):
    shape = self.shape
    if not shape:
        raise TypeError("len() of a 0-d tracecache.Tensor")
    return shape[0]


def _binary(name, reverse=False):
    def method(self, other):
        if not isinstance(other, (Tensor, int, float)) or isinstance(other, bool):
            return NotImplemented
        return op(name, other, self) if reverse else op(name, self, other)
    method.__name__ = f"__{'r' if reverse else ''}{name}__"
    return method


Tensor.torch = _torch
Tensor.__len__ = _len
Tensor.__array__ = lambda self, dtype=None: _np.asarray(self.numpy(), dtype=dtype)
Tensor.__bool__ = lambda self: bool(self.item())  # one element (a value read), as torch
Tensor.__float__ = lambda self: float(self.item())
Tensor.__int__ = lambda self: int(self.item())
Tensor.__neg__ = lambda self: op("neg", self)
Tensor.__abs__ = lambda self: op("abs", self)
for _name, _registry in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                         ("pow", "pow"), ("matmul", "matmul")):
    setattr(Tensor, f"__{_name}__", _binary(_registry))
    setattr(Tensor, f"__r{_name}__", _binary(_registry, reverse=True))
Tensor.__eq__ = _binary("eq")
Tensor.__lt__ = _binary("lt")
Tensor.__gt__ = _binary("gt")
Tensor.__hash__ = object.__hash__  # identity, as for torch tensors (== is elementwise)


def _make_ops():
    ns = _types.SimpleNamespace()
    for name in op_names():
        def fn(*inputs, _name=name, **attrs):
            return op(_name, *inputs, **attrs)
        fn.__name__ = name
        fn.__qualname__ = f"ops.{name}"
        attrs = _tracecache._op_attrs(name)
        fn.__doc__ = (f"tracecache op '{name}' (docs/ops.md); attributes: "
                      f"{', '.join(attrs) if attrs else 'none'}")
        setattr(ns, name, fn)
    return ns


ops = _make_ops()


def grad(loss, *wrt):
    """d loss / d w for every w in wrt (tensors that require a gradient), as a tuple."""
    return _tracecache.grad(loss, *wrt)


@_contextlib.contextmanager
def no_grad():
    """Ops recorded inside keep no autodiff tape (an optimizer's update, inference)."""
    previous = _tracecache._set_grad_enabled(False)
    try:
        yield
    finally:
        _tracecache._set_grad_enabled(previous)


def _stable_repr(value):
    """repr, with sets and frozensets sorted: their order follows string hashing, which changes
    from process to process (PYTHONHASHSEED), and a digest of code must not."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(_stable_repr(v) for v in value)})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_stable_repr(v) for v in value) + ")"
    return repr(value)


def _feed_code(h, code):
    """Feeds a code object (its bytecode, names and constants, nested code included) to hash h."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, _types.CodeType):
            _feed_code(h, const)
        else:
            h.update(_stable_repr(const).encode())


def _code_digest(code):
    h = _hashlib.sha256()
    _feed_code(h, code)
    return h.hexdigest()[:16]


def _as_argument(a):
    if isinstance(a, (Tensor, bool, int, float)):
        return a
    if isinstance(a, _np.ndarray):
        return from_numpy(a)
    if type(a).__module__.startswith("torch"):
        return from_torch(a)
    raise TypeError(f"a compiled function takes tracecache Tensors, NumPy arrays, torch tensors "
                    f"and numbers, not {type(a).__name__}")


class CompiledFunction:
    """What tracecache.compile returns: call it like fn (docs/python.md). It wraps the C++
    CompiledFunction (replay/engine/compiled_function.h)."""

    def __init__(self, fn, core):
        self.__wrapped__ = fn
        self._core = core
        self.__name__ = getattr(fn, "__name__", "compiled")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args):
        out = self._core._call(*[_as_argument(a) for a in args])
        return out[0] if len(out) == 1 else tuple(out)

    def stats(self):
        """This process's counters: calls, traces, entries, guard checks and failures,
        recompiles, specializations, fell_back_to_lazy, hits_per_entry."""
        return self._core.stats()

    def recompile_reasons(self):
        """One line per recompile, naming each failed guard with expected vs actual."""
        return self._core.recompile_reasons()

    def flush(self):
        """Writes the hit counts of this process's replays to the cache (also done on deletion)."""
        self._core.flush()

    def set_note(self, note):
        """Called by fn while it is traced: bytes (or str) stored with the guard entry the trace
        makes, in the cache too, and returned by `last_note` for every call that entry serves
        (for what the caller must know about a traced call that its graphs do not hold, such as
        the structure of its results). At most 1 MiB."""
        self._core._set_note(note.encode() if isinstance(note, str) else bytes(note))

    @property
    def last_note(self):
        """The note (bytes) of the entry that served the last call; b"" if none was set."""
        return self._core._last_note

    @property
    def name(self):
        return self._core.name

    @property
    def version(self):
        return self._core.version


def default_name(fn):
    """The persistent name a compiled `fn` gets by default: `module:qualname`
    (`train:Trainer.step`), which does not depend on where the script lives."""
    qual = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}:{qual}"


def compile(fn, *, name=None, version=None, dynamic_dims=None, automatic_dynamic=True, updates=None,
            recompile_limit=None, dynamic_scalars=None, host_op=None, program=None):
    """fn traced once with guards: replay/engine/compiled_function.h (docs/python.md).

    name: the persistent key's function name (default: `module:qualname`, default_name(fn)).
    version: the user version in that key (default: a digest of fn's code object).
    dynamic_dims: (argument position, dim) pairs that are dynamic from the first trace on.
    automatic_dynamic: a dim whose size alone fails the guards becomes dynamic.
    updates: (output, argument position) pairs: output k is the new value of that argument.
    recompile_limit: recompiles before falling back to tracing every call (default 8).
    dynamic_scalars: positions of number arguments fed to fn as rank-0 f32 tensors (not guarded
    by value).
    host_op: runner(payload: bytes, inputs: list of read-only ndarrays) -> list of ndarrays, for
    the graph breaks fn makes with `_host_op` (tracecache.torch's fallback to PyTorch).
    program: what the audit names the function's graphs and events by (default: fn's module)."""
    if not callable(fn):
        raise TypeError("tracecache.compile takes a callable")
    code = getattr(fn, "__code__", None)
    if name is None:
        name = default_name(fn)
    if program is None:
        program = getattr(fn, "__module__", None) or type(fn).__module__
    if version is None:
        version = _code_digest(code) if code is not None else ""
    try:
        arg_names = list(_inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        arg_names = []
    core = _tracecache._CompiledFunction(fn, name, str(version), [tuple(d) for d in (dynamic_dims or [])],
                            list(dynamic_scalars or []), [tuple(u) for u in (updates or [])],
                            automatic_dynamic, 8 if recompile_limit is None else recompile_limit,
                            arg_names, host_op, str(program))
    return CompiledFunction(fn, core)
