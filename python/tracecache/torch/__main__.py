"""`python3 -m tracecache.torch`: export a PyTorch module as a trace program; list the op mapping.

    python3 -m tracecache.torch export MODULE:FACTORY --input NAME=SPEC ... -o model.trace
    python3 -m tracecache.torch ops [--markdown]
    python3 -m tracecache.torch bench [--model resnet18] [--calls 20]

Errors print one line to stderr and exit with status 2.
"""

import argparse
import ast
import importlib
import importlib.util
import os
import re
import sys

_SPEC = re.compile(r"^(bool|i32|i64|f32)\[([0-9,\s]*)\](?:=(.+))?$")

_EXPORT_HELP = """\
Captures MODULE:FACTORY's forward with PyTorch's make_fx, maps every ATen op onto tracecache
ops and writes a trace program plus its weights (OUT's stem + .safetensors, every parameter and
buffer by state_dict name). Run it with `tracecache run OUT`. The module is put in eval mode.

MODULE is an importable module (torchvision.models) or a .py file; FACTORY a function or class
in it, called with the --kwarg arguments, returning a torch.nn.Module.

--input NAME=SPEC, once per forward argument, in order. SPEC is
  f32[1,3,224,224]                 values from normal(seed=K) for f32 (K = the input's position
                                   + 1), uniform(seed=K, low=0, high=2) for integers and bool
  i64[1,8]=uniform(seed=1, low=0, high=1000)
                                   the trace generator written after '='
  path/to/x.npy                    the file's values (the program reads the file)

example:
  python3 -m tracecache.torch export torchvision.models:resnet18 --input image=f32[1,3,224,224] -o r18.trace
  build/cli/tracecache run r18.trace --save-outputs out/
"""


class UsageError(Exception):
    pass


def _load_factory(target):
    if ":" not in target:
        raise UsageError(f"'{target}' is not MODULE:FACTORY (e.g. torchvision.models:resnet18)")
    module_name, attr = target.rsplit(":", 1)
    try:
        if module_name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(module_name))[0],
                                                          module_name)
            if spec is None or not os.path.isfile(module_name):
                raise UsageError(f"no such file: {module_name}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import '{module_name}': {e}") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"'{module_name}' has no '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"'{target}' is not callable")
    return obj


def _kwargs(items):
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--kwarg '{item}' is not NAME=VALUE")
        name, text = item.split("=", 1)
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text
    return out


def _inputs(items, out_dir):
    import numpy as np
    import torch
    from .export import ExportInput
    dtypes = {"f32": torch.float32, "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
    result = []
    for k, item in enumerate(items):
        if "=" not in item:
            raise UsageError(f"--input '{item}' is not NAME=SPEC (e.g. image=f32[1,3,224,224])")
        name, spec = item.split("=", 1)
        if spec.endswith(".npy"):
            if not os.path.isfile(spec):
                raise UsageError(f"--input {name}: no such file: {spec}")
            try:
                example = torch.from_numpy(np.load(spec))
            except ValueError as e:
                raise UsageError(f"--input {name}: cannot read {spec}: {e}") from e
            rel = os.path.relpath(os.path.abspath(spec), out_dir)
            result.append(ExportInput(name, example, f'npy("{rel}")'))
            continue
        m = _SPEC.match(spec.replace(" ", ""))
        if not m:
            raise UsageError(f"--input {name}: '{spec}' is not DTYPE[DIMS] (dtype bool, i32, i64 or f32), "
                             f"DTYPE[DIMS]=GENERATOR or a .npy file")
        dtype = dtypes[m.group(1)]
        shape = [int(d) for d in m.group(2).split(",") if d.strip()]
        generator = m.group(3)
        if dtype == torch.float32:
            example = torch.randn(shape)
            generator = generator or f"normal(seed={k + 1})"
        else:
            example = torch.zeros(shape, dtype=dtype)
            generator = generator or f"uniform(seed={k + 1}, low=0, high=2)"
        result.append(ExportInput(name, example, generator))
    return result


def _export(args):
    import torch
    from .export import export
    factory = _load_factory(args.target)
    torch.manual_seed(args.seed)
    model = factory(**_kwargs(args.kwarg))
    if isinstance(model, torch.nn.Module):
        model.eval()
    elif not callable(model):
        raise UsageError(f"{args.target}(...) returned {type(model).__name__}, not a torch.nn.Module")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise UsageError(f"-o {args.output}: no such directory: {out_dir}")
    inputs = _inputs(args.input, out_dir)
    header = [f"exported by tracecache.torch from {args.target} (torch {torch.__version__}, seed {args.seed})"]
    result = export(model, inputs, args.output, header)
    print(f"wrote {result.trace_path} and {result.weights_path} (outputs: {', '.join(result.outputs)})")


def _ops(args):
    from .lowering import table
    if args.markdown:
        from .docs import markdown_table
        print(markdown_table(), end="")
        return
    for name, ops, note in table():
        print(f"{name:48} {ops}" + (f"  ({note})" if note else ""))


def _bench(args):
    from .bench import run
    run(args.model, args.calls, args.resolution, args.length)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tracecache.torch",
                                     description="PyTorch capture for tracecache.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    ex = sub.add_parser("export", help="write a PyTorch module as a trace program and its weights",
                        description=_EXPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("target", metavar="MODULE:FACTORY")
    ex.add_argument("--input", action="append", default=[], metavar="NAME=SPEC",
                    help="a forward argument (in order): f32[1,3,224,224], i64[1,8]=uniform(...), x.npy")
    ex.add_argument("-o", "--output", required=True, metavar="OUT.trace", help="the program to write")
    ex.add_argument("--kwarg", action="append", default=[], metavar="NAME=VALUE",
                    help="a keyword argument of FACTORY (a Python literal), e.g. image_size=32")
    ex.add_argument("--seed", type=int, default=0, help="torch.manual_seed before FACTORY runs (default 0)")
    ops = sub.add_parser("ops", help="list the ATen ops tracecache.torch maps and onto what")
    ops.add_argument("--markdown", action="store_true", help="as the table of docs/python.md")
    bench = sub.add_parser("bench", help="per-call time against PyTorch eager and torch.jit.trace, capture "
                                         "time per op")
    bench.add_argument("--model", action="append", choices=["resnet18", "bert"], default=[],
                       help="a model to time (default: both)")
    bench.add_argument("--calls", type=int, default=20, help="timed calls per model (default 20)")
    bench.add_argument("--resolution", type=int, default=224, help="resnet18's image size (default 224)")
    bench.add_argument("--length", type=int, default=128, help="bert's sequence length (default 128)")
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            if not args.input:
                raise UsageError("export needs at least one --input NAME=SPEC")
            _export(args)
        elif args.command == "bench":
            _bench(args)
        else:
            _ops(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # every failure is reported as one line, never a traceback
        from .errors import CaptureError
        kind = "" if isinstance(e, (CaptureError, ValueError, OSError)) else f"{type(e).__name__}: "
        print(f"error: {kind}{e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
