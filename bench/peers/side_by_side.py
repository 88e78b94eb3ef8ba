#!/usr/bin/python3
"""PyTorch 1.13 and tracecache once mode, side by side in one run, on the ten zoo models.

For every (batch, threads) and model: PyTorch eager, PyTorch jit (torch.jit.trace + freeze)
and tracecache once mode (`tracecache zoo run NAME --mode once`) are measured in interleaved
rounds, so the ratio tracecache / best PyTorch is measured under the same load. The PyTorch
systems are persistent worker processes (this script with --worker) driven over pipes, built
and warmed up before the first round; tracecache runs one `zoo run` process per round (the
Python package cannot run a zoo model or a trace program), whose first step(s) are warm-up and
not timed. FLOPs per step come from tracecache's sim cost model (the registry's per-op cost,
summed over the kernels of one step in a `--backend sim:h100 --timeline` run). See README.md.
train_side_by_side.py runs this with training steps (TRAINING) instead of the forward.

Run with Debian's interpreter, which has python3-torch:
    /usr/bin/python3 bench/peers/side_by_side.py --quick
    /usr/bin/python3 bench/peers/side_by_side.py --models resnet18 --batches 1 --threads 2
"""

import argparse
import json
import math
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torch_peer  # noqa: E402  (model builders, BLAS probes; imports torch only when asked)

MODELS = torch_peer.MODELS
TORCH_SYSTEMS = ["eager", "jit"]  # the worker kinds (INFERENCE.torch_kinds: both)
PASSIVE = "_passive"  # suffix of a PyTorch system run with OMP_WAIT_POLICY=PASSIVE
ACTIVE = "_active"  # suffix of tracecache run with OMP_WAIT_POLICY=active (its default: passive)
LAZY = "_lazy"  # suffix of tracecache in lazy mode (--tc-lazy)
SEQ_LEN = 128
RESOLUTION = 224
SIM_DEVICE = "sim:h100"  # only its FLOP counts are used: they are the registry's, not the device's
WORKER_START_TIMEOUT_S = 1800  # building + jit.trace/freeze + warm-up of the largest models

# What a step is. This script measures the forward (inference); train_side_by_side.py passes
# TRAINING to main(): the workers, the rounds, the tables and the JSON are the same code.
INFERENCE = SimpleNamespace(
    tool="bench/peers/side_by_side.py", step="forward", train=False,
    description="PyTorch 1.13 eager and jit (trace+freeze) against tracecache once mode on the "
                "zoo models, measured in interleaved rounds; per (batch, threads) a table of "
                "median step times, tracecache / best PyTorch, GFLOP per step and tracecache's "
                "fraction of peak FLOP/s. Run with /usr/bin/python3.",
    torch_kinds=["eager", "jit"], zoo_command=["run"], batches="1,8",
    quick={"batches": "1"}, quick_note="batch 1",
    torch_note="PyTorch eager and jit (trace+freeze) in persistent workers")
TRAINING = SimpleNamespace(
    tool="bench/peers/train_side_by_side.py", step="training step", train=True,
    description="A training step (forward, cross-entropy on random labels, backward, SGD "
                "momentum 0.9 lr 0.01) in PyTorch 1.13 eager against tracecache once mode "
                "(`zoo train`) on the zoo models, measured in interleaved rounds; per (batch, "
                "threads) a table of median step times, tracecache / PyTorch, GFLOP per step "
                "and tracecache's fraction of peak FLOP/s. Run with /usr/bin/python3.",
    torch_kinds=["eager"],
    zoo_command=["train", "--optimizer", "sgd", "--momentum",
                 str(torch_peer.TrainRunner.momentum), "--lr", str(torch_peer.TrainRunner.lr)],
    batches="8", quick={"resolution": 112, "seq_len": 64},
    quick_note="112 px images, 64 tokens",
    torch_note="PyTorch eager training steps (train mode, cross_entropy, backward, SGD "
               "momentum, loss.item()) in persistent workers")


def log(msg):
    print(f"[side_by_side {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    """A system could not run one model: recorded in the table, the run goes on."""


# --------------------------------------------------------------------------------------
# Command line

def int_list(text, name, parser):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--{name} takes comma-separated positive integers, got '{text}'")
    if not values or any(v < 1 for v in values):
        parser.error(f"--{name} takes comma-separated positive integers, got '{text}'")
    return values


def parse_args(argv, bench=INFERENCE):
    p = argparse.ArgumentParser(
        prog=os.path.basename(bench.tool), description=bench.description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="tracecache build directory (its cli/tracecache is run)")
    p.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated subset of: " + ", ".join(MODELS))
    p.add_argument("--batches", default=bench.batches, help="comma-separated batch sizes")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--resolution", type=int, default=RESOLUTION,
                   help="image height = width of the image models (vit_b_16: a multiple of 16)")
    p.add_argument("--seq-len", type=int, default=SEQ_LEN,
                   help="bert_base's sequence length (at most 512)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps per system and measurement (default: from --budget)")
    p.add_argument("--budget", type=float, default=4.0,
                   help="without --steps: seconds of timed steps per system and measurement; "
                        "the step count is budget / (warm-up step time), within "
                        "[--min-steps, --max-steps]")
    p.add_argument("--min-steps", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds per measurement; each runs a block of steps of every system, "
                        "in an order rotated every round (at most one round per step)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps of each PyTorch worker before the first round (jit: "
                        "after the first call)")
    p.add_argument("--tc-warmup", type=int, default=2,
                   help="untimed first steps of every tracecache process (the first traces "
                        "the program, compiles it and prepares weights; the second still runs "
                        "on a fresh heap)")
    p.add_argument("--settle", type=float, default=0.25,
                   help="seconds to wait before every block of steps, so the idle threads of "
                        "the system that ran before stop spinning")
    p.add_argument("--torch-wait-policies", default="default,passive",
                   help="at more than one thread, PyTorch runs once per policy: 'default' (the "
                        "environment's OMP_WAIT_POLICY, normally unset: libgomp's workers spin "
                        "after each parallel region while OpenBLAS's pthreads want the same "
                        "cores) and 'passive' (OMP_WAIT_POLICY=PASSIVE); best PyTorch is the "
                        "fastest of all")
    p.add_argument("--tc-wait-policies", default="default,active",
                   help="tracecache's runs at more than one thread: 'default' (the environment's "
                        "OMP_WAIT_POLICY; unset, tracecache makes libgomp's idle threads sleep) and "
                        "'active' (OMP_WAIT_POLICY=active: they spin, as PyTorch's do by default); "
                        "the tracecache figure is the faster, marked A when active")
    p.add_argument("--pin", choices=["rotate", "none"], default="rotate",
                   help="cells with fewer threads than CPUs: 'rotate' (default) runs every "
                        "system's block of round r on the same CPUs, rotating over the CPUs "
                        "this process may use round by round, so no system gets a faster CPU "
                        "by chance (on a VM one vCPU can be slower than another: a busy SMT "
                        "sibling on the host); 'none' leaves placement to the scheduler")
    p.add_argument("--tc-lazy", action="store_true",
                   help="also tracecache in lazy mode (trace, hash and look up every step), "
                        "shown in its own column and not in the ratio")
    p.add_argument("--quick", action="store_true",
                   help=f"a sanity run: {bench.quick_note} and the largest thread count "
                        "only (unless given), --budget 0.6, --rounds 2, --min-steps 2")
    p.add_argument("--seed", type=int, default=0, help="PyTorch's weights and inputs")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="machine-readable output: to stdout instead of the tables (no PATH or "
                        "'-'), or to PATH in addition to the tables")
    p.add_argument("--worker", choices=TORCH_SYSTEMS, help=argparse.SUPPRESS)
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--nthreads", type=int, help=argparse.SUPPRESS)
    given = {a.split("=")[0] for a in (argv or []) if a.startswith("--")}
    args = p.parse_args(argv)
    if args.worker:
        return args
    args.bench = bench

    args.model_list = [m for m in args.models.split(",") if m.strip()]
    bad = [m for m in args.model_list if m not in MODELS]
    if bad or not args.model_list:
        p.error(f"unknown model(s): {', '.join(bad) or '(none given)'}; choose from "
                f"{', '.join(MODELS)}")
    if args.quick:
        quick = {"threads": str(len(os.sched_getaffinity(0))), "budget": 0.6, "rounds": 2,
                 "min_steps": 2, **bench.quick}
        for name, value in quick.items():
            if "--" + name.replace("_", "-") not in given:
                setattr(args, name, value)
    args.policy_list = [v for v in args.torch_wait_policies.split(",") if v.strip()]
    args.tc_policy_list = [v.strip() for v in args.tc_wait_policies.split(",") if v.strip()]
    if not args.tc_policy_list or any(v not in ("default", "active") for v in args.tc_policy_list):
        p.error(f"--tc-wait-policies takes default and/or active, got '{args.tc_wait_policies}'")
    if not args.policy_list or any(v not in ("default", "passive") for v in args.policy_list):
        p.error(f"--torch-wait-policies takes default and/or passive, got "
                f"'{args.torch_wait_policies}'")
    args.batch_list = int_list(args.batches, "batches", p)
    args.thread_list = int_list(args.threads, "threads", p)
    for name in ("rounds", "min_steps", "max_steps", "resolution", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps is not None and args.steps < 1:
        p.error("--steps must be at least 1")
    if "vit_b_16" in args.model_list and args.resolution % 16:
        p.error(f"--resolution must be a multiple of 16 for vit_b_16 (16 px patches), got "
                f"{args.resolution}")
    if "bert_base" in args.model_list and args.seq_len > 512:
        p.error(f"--seq-len must be at most 512 for bert_base (its position embeddings), got "
                f"{args.seq_len}")
    if args.min_steps > args.max_steps:
        p.error("--min-steps must not exceed --max-steps")
    if not args.budget > 0:
        p.error("--budget must be a positive number of seconds")
    if args.warmup < 0 or args.tc_warmup < 0 or not args.settle >= 0:
        p.error("--warmup, --tc-warmup and --settle must be >= 0")
    import importlib.util
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None:
        p.error(f"{sys.executable} cannot import torch and torchvision: run with /usr/bin/python3 "
                "(Debian's python3-torch; scripts/setup.sh --peers)")
    if args.json not in (None, "-"):
        try:  # fail now, not after the run
            with open(args.json, "a"):
                pass
        except OSError as e:
            p.error(f"cannot write --json {args.json}: {e.strerror}")
    args.cli = os.path.join(args.build, "cli", "tracecache")
    if not os.access(args.cli, os.X_OK):
        p.error(f"no tracecache binary at {args.cli}: build it (ninja -C BUILD tracecache) or "
                f"pass --build DIR")
    return args


# --------------------------------------------------------------------------------------
# Machine

def cpu_info():
    """CPU model, cores, and the peak f32 FLOP/s of its cores with FMA: 16 lanes with AVX-512
    (assumed full width: a measured oneDNN convolution here ran above 32 flop/cycle per core at
    the nominal clock, which a double-pumped AVX-512 or AVX2 cannot), else 8 (AVX2)."""
    model, mhz, flags = platform.processor() or "?", [], set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "cpu MHz":
                    mhz.append(float(value))
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    max_mhz, source = None, None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        m = re.search(r"^CPU max MHz:\s*([0-9.]+)", out, re.M)
        if m:
            max_mhz, source = float(m.group(1)), "lscpu 'CPU max MHz'"
    except OSError:
        pass
    if max_mhz is None and mhz:
        max_mhz, source = max(mhz), "/proc/cpuinfo 'cpu MHz' (lscpu has no max MHz: a VM)"
    cores = len(os.sched_getaffinity(0))
    # lanes x 2 FMA pipes x 2 flops (multiply + add) per cycle and core.
    lanes, isa = (16, "AVX-512") if "avx512f" in flags else (8, "AVX2")
    flops_per_cycle = lanes * 2 * 2
    peak = cores * flops_per_cycle * max_mhz / 1e3 if max_mhz else None
    return {"model": model, "cores": cores, "max_mhz": max_mhz, "mhz_source": source,
            "flops_per_cycle_per_core": flops_per_cycle, "peak_gflops": peak,
            "peak_note": f"{cores} cores x {flops_per_cycle} f32 flop/cycle ({isa}: {lanes} lanes x 2 "
                         f"FMA pipes x 2) x {max_mhz:.0f} MHz ({source})" if max_mhz else "clock unknown"}


def mapped_libraries(pid="self"):
    libs = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    libs.add(parts[5])
    except OSError:
        pass
    return libs


def kernel_libraries(libs):
    """The mapped libraries that do the math or own the threads, resolved to real files."""
    keys = ("blas", "lapack", "dnnl", "mkldnn", "gomp", "omp", "tracecache")
    return sorted({os.path.realpath(p) for p in libs
                   if any(k in os.path.basename(p).lower() for k in keys)})


def thread_env(threads, passive=False, active=False):
    env = dict(os.environ)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if active:
        env["OMP_WAIT_POLICY"] = "active"
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "TRACECACHE_THREADS"):
        env[var] = str(threads)
    return env


# --------------------------------------------------------------------------------------
# PyTorch worker (runs in its own process: --worker eager|jit)

def worker_main(args):
    """Builds the model with torch_peer's builder, warms up, then serves 'run K' requests on
    stdin, answering one JSON line per request on stdout. Everything else goes to stderr."""
    # The protocol gets its own copy of stdout; fd 1 becomes stderr, so that nothing else
    # (Python prints, a library's printf) can write into the pipe.
    import ctypes
    import signal
    # PR_SET_PDEATHSIG: a worker still building its model ends with the driver.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch
    torch_peer.torch = torch
    torch_peer.configure_threads(args.nthreads)
    torch.set_grad_enabled(args.train)
    build_args = SimpleNamespace(seed=args.seed, batch=args.batch, seq_len=args.seq_len,
                                 resolution=args.resolution)

    def send(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        t0 = time.perf_counter()
        model, inputs, params, _ = torch_peer.build(args.model, build_args)
        runner_cls = torch_peer.TrainRunner if args.train else \
            torch_peer.EagerRunner if args.worker == "eager" else torch_peer.JitRunner
        runner = runner_cls(model, inputs)
        runner.prepare()
        setup_s = time.perf_counter() - t0
        warm = [runner.step() for _ in range(args.warmup)]
    except Exception as e:  # reported to the driver, which records it for this model
        send({"error": f"{type(e).__name__}: {e}"})
        return 1
    path, lib = torch_peer.openblas_handle()
    info = {"ready": True, "params": params, "setup_s": setup_s, "warmup_ns": warm,
            "torch": torch.__version__, "torchvision": __import__("torchvision").__version__,
            "aten_threads": torch.get_num_threads(), "libraries": kernel_libraries(
                mapped_libraries()), "openblas_library": path}
    if lib is not None:
        lib.openblas_get_config.restype = ctypes.c_char_p
        info["openblas_config"] = lib.openblas_get_config().decode()
        info["openblas_threads"] = lib.openblas_get_num_threads()
    info.update(runner.info)
    send(info)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[:1] == ["run"] and len(cmd) == 2:
            send({"ns": [runner.step() for _ in range(int(cmd[1]))],
                  "cpus": sorted(os.sched_getaffinity(0))})
        elif cmd == ["sgemm"]:
            send({"gflops": sgemm_gflops(torch)})
        elif cmd == ["quit"]:
            break
        else:
            send({"error": f"bad request {line.strip()!r}"})
    return 0


def sgemm_gflops(torch, n=2048, reps=5):
    """The best of `reps` f32 n x n x n matrix products through PyTorch's BLAS (OpenBLAS
    sgemm), in GFLOP/s: what this machine's cores reach in practice, next to the nominal peak."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(reps))
    return 2 * n ** 3 / best / 1e9


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class TorchWorker:
    """The driver's handle on one persistent PyTorch worker process."""

    def __init__(self, system, model, batch, threads, args):
        self.system = system
        kind = system.removesuffix(PASSIVE)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", model,
               "--batch", str(batch), "--nthreads", str(threads), "--seed", str(args.seed),
               "--resolution", str(args.resolution), "--seq-len", str(args.seq_len),
               "--warmup", str(max(args.warmup, 2 if kind == "jit" else 1))]
        cmd += ["--train"] if args.bench.train else []
        self.err = tempfile.TemporaryFile("w+")  # a file: a chatty worker never blocks on it
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True,
                                     env=thread_env(threads, system.endswith(PASSIVE)))
        self.info = None

    def _reply(self, timeout_s):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            self.err.seek(0)
            err = self.err.read().strip().splitlines()
            raise Failure(f"{self.system} worker " + ("timed out" if not ready else
                          f"died (exit {self.proc.wait()})") + (f": {err[-1]}" if err else ""))
        reply = json.loads(line)
        if "error" in reply:
            raise Failure(f"{self.system}: {reply['error']}")
        return reply

    def ready(self):
        self.info = self._reply(WORKER_START_TIMEOUT_S)
        return self.info

    def pin(self, cpus):
        """Every thread of the worker on `cpus` (threads it starts later inherit it). A worker
        that has ended is left alone: its next request reports it."""
        try:
            tids = os.listdir(f"/proc/{self.proc.pid}/task")
        except FileNotFoundError:
            return
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except (ProcessLookupError, FileNotFoundError):
                pass  # a thread that ended

    def run(self, steps, timeout_s):
        """`steps` steps: their ms and the CPUs the worker's main thread could run them on."""
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()
        reply = self._reply(timeout_s)
        return [ns / 1e6 for ns in reply["ns"]], set(reply["cpus"])

    def sgemm(self):
        self.proc.stdin.write("sgemm\n")
        self.proc.stdin.flush()
        return self._reply(600)["gflops"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


# --------------------------------------------------------------------------------------
# tracecache

def tracecache_version(cli):
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or out.stderr.strip()


def zoo_command(args, model, mode, batch, threads, steps):
    """`tracecache zoo run` (or train: args.bench.zoo_command) of `model` without the cache."""
    return [args.cli, "zoo", *args.bench.zoo_command, model, "--mode", mode, "--batch",
            str(batch), "--threads", str(threads), "--steps", str(steps), "--no-cache", "-q"] + \
        (["--seq-len", str(args.seq_len)] if model == "bert_base" else
         ["--resolution", str(args.resolution)])


def tracecache_steps(args, model, batch, threads, steps, watch_maps=False, active=False,
                     mode="once", cpus=None):
    """One `tracecache zoo run` (or train) process of --tc-warmup + `steps` steps, on `cpus`
    (None: any): the timed steps' ms, the CPUs the process could run on (read from it once it
    started) and with watch_maps the kernel libraries mapped into it."""
    total = args.tc_warmup + steps
    cmd = zoo_command(args, model, mode, batch, threads, total) + ["--json"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=thread_env(threads, active=active),
                                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        try:  # not yet reaped, so readable even if it has already exited
            ran_on = os.sched_getaffinity(proc.pid)
        except ProcessLookupError:
            ran_on = None
        libs = set()
        while watch_maps and proc.poll() is None:
            libs |= mapped_libraries(proc.pid)
            time.sleep(0.02)
        proc.wait()
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read().strip()
    if proc.returncode != 0:
        raise Failure(f"tracecache: {' '.join(cmd[1:])} exited {proc.returncode}: "
                      f"{errors.splitlines()[-1] if errors else '(no message)'}")
    report = json.loads(text)
    step_ms = report["step_ms"]
    traces = 1 if mode == "once" else total
    if len(step_ms) != total or report["counters"]["traces"] != traces:
        raise Failure(f"tracecache: expected {total} steps and {traces} trace(s), got "
                      f"{len(step_ms)} steps and {report['counters']['traces']} traces")
    return step_ms[args.tc_warmup:], ran_on, kernel_libraries(libs) if watch_maps else None


def model_gflop(args, model, batch, threads):
    """FLOPs of one step (forward, or training step) by tracecache's cost model: the sum of the
    registry cost of every kernel of one sim step (flops of a fused kernel are its ops')."""
    with tempfile.TemporaryDirectory() as tmp:
        timeline = os.path.join(tmp, "timeline.json")
        cmd = zoo_command(args, model, "once", batch, threads, 1) + [
            "--backend", SIM_DEVICE, "--timeline", timeline]
        done = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(threads),
                              check=False)
        if done.returncode != 0:
            raise Failure(f"sim FLOP count: exited {done.returncode}: {done.stderr.strip()}")
        with open(timeline) as f:
            data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return sum(e["args"]["flops"] for e in events
               if e.get("cat") == "kernel" and "flops" in e.get("args", {})) / 1e9


# --------------------------------------------------------------------------------------
# One measurement: a model at one batch and thread count

def summarize(ms):
    q = statistics.quantiles(ms, n=10, method="inclusive") if len(ms) >= 2 else [ms[0]] * 9
    return {"median_ms": statistics.median(ms), "p10_ms": q[0], "p90_ms": q[8],
            "min_ms": min(ms), "steps": len(ms), "all_ms": ms}


def split_steps(n, rounds):
    return [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]


def torch_systems(args, threads):
    """The PyTorch systems of a measurement: eager and jit, and at more than one thread also
    with OMP_WAIT_POLICY=PASSIVE (--torch-wait-policies)."""
    policies = args.policy_list if threads > 1 else ["default"]
    return [kind + ("" if policy == "default" else PASSIVE)
            for policy in policies for kind in args.bench.torch_kinds]


def tc_systems(args, threads):
    """tracecache's systems of a measurement: its default, at more than one thread also with
    OMP_WAIT_POLICY=active (--tc-wait-policies), and with --tc-lazy lazy mode."""
    policies = args.tc_policy_list if threads > 1 else ["default"]
    return ["tracecache" + ("" if policy == "default" else ACTIVE) for policy in policies] + \
        (["tracecache" + LAZY] if args.tc_lazy else [])


def round_cpus(args, threads, r):
    """The CPUs every system's block of round `r` runs on: `threads` of the CPUs this process
    may use, rotated round by round (--pin rotate); None (any) at as many threads as CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    if args.pin == "none" or threads >= len(allowed):
        return None
    return {allowed[(r * threads + k) % len(allowed)] for k in range(threads)}


def measure(args, model, batch, threads, env_out):
    row = {"model": model, "errors": {}, "loadavg_start": list(os.getloadavg())}
    workers = {}
    try:
        sgemm_key = f"sgemm_gflops@{threads}"
        for system in torch_systems(args, threads):  # started together: builds overlap
            workers[system] = TorchWorker(system, model, batch, threads, args)
        for system, w in list(workers.items()):
            try:
                info = w.ready()
            except Failure as e:
                row["errors"][system] = str(e)
                w.close()
                del workers[system]
                continue
            row[system] = {"setup_s": info["setup_s"],
                           "warmup_ms": [ns / 1e6 for ns in info["warmup_ns"]]}
            row[system].update({k: info[k] for k in ("trace_s", "freeze_s", "first_call_s",
                                                     "classes") if k in info})
            if "note" in info and f"{model}: {info['note']}" not in env_out.get("torch_notes", []):
                env_out.setdefault("torch_notes", []).append(f"{model}: {info['note']}")
            env_out.setdefault("torch", {k: info.get(k) for k in (
                "torch", "torchvision", "openblas_library", "openblas_config")})
            env_out.setdefault("torch_workers", {})[f"{system}@{threads}"] = {
                k: info.get(k) for k in ("aten_threads", "openblas_threads", "libraries")}
        if sgemm_key not in env_out and "eager" in workers:
            try:  # once per thread count, alone on the machine like the steps
                env_out[sgemm_key] = workers["eager"].sgemm()
            except Failure as e:
                row["errors"]["eager"] = str(e)
        for s in tc_systems(args, threads):
            row.setdefault(s, {})
        systems = [s for s in torch_systems(args, threads) + tc_systems(args, threads)
                   if s not in row["errors"]]
        times = {s: [] for s in systems}
        # Pinned rounds: the steps' ms by the CPUs the system could run on, as read from its
        # process (so a pin that did not take shows as such).
        by_cpus = {s: {} for s in systems}

        def block(s, steps, r):
            """`steps` timed steps of system `s` in round `r`, appended to times[s]."""
            if s in row["errors"] or not steps:
                return
            # Idle threads of the system before (OpenBLAS's spin on sched_yield for ~0.1 s
            # after their last GEMM, libgomp's for a while after a parallel region) go to
            # sleep before this block starts.
            time.sleep(args.settle)
            cpus = round_cpus(args, threads, r)
            try:
                if s.startswith("tracecache"):
                    watch = f"tc@{threads}" not in env_out.get("tracecache_processes", {})
                    ms, ran_on, libs = tracecache_steps(args, model, batch, threads, steps, watch,
                                                        active=s.endswith(ACTIVE),
                                                        mode="lazy" if s.endswith(LAZY) else "once",
                                                        cpus=cpus)
                    if libs is not None:
                        env_out.setdefault("tracecache_processes", {})[f"tc@{threads}"] = {
                            "libraries": libs}
                else:
                    per_step = times[s][0] / 1e3 if times[s] else WORKER_START_TIMEOUT_S
                    if cpus:
                        workers[s].pin(cpus)
                    ms, ran_on = workers[s].run(steps, timeout_s=max(600, 50 * per_step * steps))
                times[s] += ms
                if cpus and r > 0:
                    key = ",".join(map(str, sorted(ran_on))) if ran_on else "?"
                    by_cpus[s].setdefault(key, []).extend(ms)
            except Failure as e:
                row["errors"][s] = str(e)

        # Round 0: one step of every system, all warmed up; its times also set the step counts.
        for s in systems:
            block(s, 1, 0)
        systems = [s for s in systems if s not in row["errors"]]
        if args.steps is not None:
            counts = {s: args.steps for s in systems}
        else:
            counts = {s: min(args.max_steps, max(args.min_steps, round(
                args.budget / max(times[s][0] / 1e3, 1e-6)))) for s in systems}
        rounds = min([args.rounds] + list(counts.values())) if counts else 0
        plan = {s: [1] + split_steps(counts[s] - 1, rounds - 1) if rounds > 1 else [1]
                for s in systems}
        log(f"  {model} b{batch} t{threads}: steps " + ", ".join(
            f"{s} {counts[s]}" for s in systems) + f" in {rounds} rounds")
        for r in range(1, rounds):
            for s in systems[r % len(systems):] + systems[:r % len(systems)]:
                block(s, plan[s][r], r)
        for s in systems:
            if s not in row["errors"] and times[s]:
                row[s].update(summarize(times[s]))
                if by_cpus[s]:
                    row[s]["median_ms_by_cpus"] = {c: statistics.median(v)
                                                   for c, v in sorted(by_cpus[s].items())}
        row["rounds"] = rounds
        row["pinned"] = [sorted(c) for c in (round_cpus(args, threads, r) for r in range(rounds))
                         if c] or None
        row["loadavg_end"] = list(os.getloadavg())
    finally:
        for w in workers.values():
            w.close()
    return row


def threads_peak(cpu, threads):
    """The peak GFLOP/s of `threads` of the cores (all of them at most)."""
    return cpu["peak_gflops"] * min(threads, cpu["cores"]) / cpu["cores"] \
        if cpu["peak_gflops"] else None


def finish_row(row, gflop, peak_gflops, torch_kinds):
    best = [row[s]["median_ms"] for s in row
            if s.removesuffix(PASSIVE) in torch_kinds and "median_ms" in row[s]]
    tcs = [row[s]["median_ms"] for s in ("tracecache", "tracecache" + ACTIVE)
           if "median_ms" in row.get(s, {})]
    tc = min(tcs) if tcs else None
    row["best_torch_ms"] = min(best) if best else None
    row["best_tracecache_ms"] = tc
    row["ratio"] = tc / min(best) if tc and best else None
    row["gflop"] = gflop
    row["tracecache_gflops"] = gflop / (tc / 1e3) if tc and gflop else None
    row["tracecache_peak_fraction"] = row["tracecache_gflops"] / peak_gflops \
        if row["tracecache_gflops"] and peak_gflops else None
    return row


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# --------------------------------------------------------------------------------------
# Output

def header_lines(report):
    env, cpu = report["env"], report["env"]["cpu"]
    torch_env = env.get("torch", {})
    blas = torch_env.get("openblas_config") or "?"
    lines = [
        f"machine: {cpu['model']}, {cpu['cores']} cores; peak {cpu['peak_gflops']:.0f} GFLOP/s "
        f"f32 = {cpu['peak_note']}" if cpu["peak_gflops"] else f"machine: {cpu['model']}",
        f"load average: start {' '.join(f'{x:.2f}' for x in env['loadavg_start'])}, end "
        f"{' '.join(f'{x:.2f}' for x in env.get('loadavg_end', []))}",
        f"PyTorch {torch_env.get('torch', '?')} (torchvision {torch_env.get('torchvision', '?')}"
        f"), BLAS {blas.split(' NO_')[0]} from {torch_env.get('openblas_library', '?')}",
        f"tracecache {env['tracecache_version']} ({report['config']['cli']})",
    ]
    sgemm = sorted((int(k.split("@")[1]), v) for k, v in env.items()
                   if k.startswith("sgemm_gflops@"))
    if sgemm:
        core_peak = (cpu["peak_gflops"] or 0) / cpu["cores"]
        lines.append("measured: OpenBLAS sgemm 2048^3 in a PyTorch worker (best of 5) "
                     + ", ".join(f"{v:.0f} GFLOP/s at {t} thread{'s' if t > 1 else ''}"
                                 for t, v in sgemm))
        fractions = [r.get("tracecache_peak_fraction") or 0 for t in report["tables"]
                     for r in t["rows"]]
        if any(v > t * core_peak for t, v in sgemm) or any(f > 1 for f in fractions):
            lines.append("  (sgemm or a model ran above the peak of that many cores at the clock "
                         "above: the cores run faster than it, and %peak overstates the fraction)")
    if env["loadavg_start"][0] >= 0.5:
        lines.append(f"WARNING: the machine was not quiet (1-minute load average "
                     f"{env['loadavg_start'][0]:.2f} before this run started): other work "
                     f"competes for the {cpu['cores']} cores; multi-threaded PyTorch suffers most "
                     f"(libgomp barriers wait for descheduled threads)")
    for key, proc in sorted(env.get("tracecache_processes", {}).items()):
        lines.append(f"tracecache process libraries ({key}): {', '.join(proc['libraries'])}")
    for key, w in sorted(env.get("torch_workers", {}).items()):
        lines.append(f"PyTorch worker {key}: ATen threads {w['aten_threads']}, OpenBLAS threads "
                     f"{w['openblas_threads']}; {', '.join(w['libraries'])}")
    policies = report["config"]["torch_wait_policies"]
    lines.append(f"OMP_WAIT_POLICY in the environment: {env['omp_wait_policy'] or 'unset'}"
                 + ("; PyTorch at >1 thread also with OMP_WAIT_POLICY=PASSIVE: a P marks the "
                    "cells where that was faster (see JSON *_passive)"
                    if "passive" in policies else "")
                 + ("; tracecache at >1 thread also with OMP_WAIT_POLICY=active: an A marks the "
                    "cells where that was faster (see JSON tracecache_active)"
                    if "active" in report["config"].get("tc_wait_policies", []) else ""))
    config = report["config"]
    lines.append(f"steps: {config['torch_note']}; tracecache once mode"
                 + (" (and lazy)" if config["tc_lazy"] else "")
                 + f", one `zoo {config['zoo_command'][0]}` process per round (first "
                 f"{config['tc_warmup']} step(s) untimed); median step ms; rounds interleave "
                 f"all systems; images {config['resolution']} px, bert_base {config['seq_len']} "
                 f"tokens")
    lines.append(f"GFLOP: tracecache's cost model (registry op costs summed over one "
                 f"{SIM_DEVICE} {config['step']}); %peak = tracecache GFLOP/s / the peak of as "
                 f"many cores as threads")
    lines += [f"note: {n}" for n in env.get("torch_notes", [])]
    return lines


def tables(report):
    out = header_lines(report)

    kinds = report["config"]["torch_systems"]
    columns = kinds + ["tracecache"] + (["tracecache" + LAZY] if report["config"]["tc_lazy"]
                                        else [])
    labels = {**{k: (k + " ms", k) for k in kinds}, "tracecache": ("tc once", "tc"),
              "tracecache" + LAZY: ("tc lazy", "lazy")}  # column heading, in "steps"
    ratio_name = "tc/best" if len(kinds) > 1 else f"tc/{kinds[0]}"

    def shown(row, s):
        """The system whose cell is shown for `s`: its other wait policy's variant (PyTorch's
        PASSIVE, tracecache's active) when that was faster."""
        if s.endswith(LAZY):
            return s
        other = s + (ACTIVE if s == "tracecache" else PASSIVE)
        v = row.get(s, {}).get("median_ms")
        p = row.get(other, {}).get("median_ms")
        return other if p is not None and (v is None or p < v) else s

    def ms(row, s):
        v = row.get(shown(row, s), {}).get("median_ms")
        mark = ("A" if s == "tracecache" else "P") if shown(row, s) != s else ""
        return f"{v:{9 - len(mark)}.2f}{mark}" if v is not None else f"{'-':>9}"

    for t in report["tables"]:
        out += ["", f"{report['config']['step']}, batch {t['batch']}, threads {t['threads']} "
                    f"(ATen/OpenBLAS/OMP and tracecache --threads all {t['threads']})",
                f"{'model':<16} " + " ".join(f"{labels[c][0]:>9}" for c in columns)
                + f" {ratio_name:>8} {'GFLOP':>7} {'tc GF/s':>8} {'%peak':>6}  steps "
                + "/".join(labels[c][1] for c in columns) + " x rounds"]
        for r in t["rows"]:
            ratio = f"{r['ratio']:8.2f}" if r.get("ratio") else f"{'-':>8}"
            gflop = f"{r['gflop']:7.2f}" if r.get("gflop") else f"{'-':>7}"
            gfs = f"{r['tracecache_gflops']:8.1f}" if r.get("tracecache_gflops") else f"{'-':>8}"
            frac = f"{100 * r['tracecache_peak_fraction']:5.1f}%" \
                if r.get("tracecache_peak_fraction") else f"{'-':>6}"
            steps = "/".join(str(r.get(shown(r, s), {}).get("steps", "-")) for s in columns)
            out.append(f"{r['model']:<16} " + " ".join(ms(r, s) for s in columns)
                       + f" {ratio} {gflop} {gfs} {frac}  {steps} x {r.get('rounds', '-')}")
        g = t["geomean_ratio"]
        out.append(f"{'geomean ' + ratio_name:<16} " + " ".join(f"{'':>9}" for _ in columns)
                   + " " + (f"{g:8.2f}" if g else f"{'-':>8}")
                   + f"  ({t['geomean_models']} model{'' if t['geomean_models'] == 1 else 's'})")
        for r in t["rows"]:
            for s, e in r["errors"].items():
                out.append(f"  {r['model']} {s}: {e}")
    out.append(f"\nwall time {report['wall_s']:.0f} s")
    return "\n".join(out)


# --------------------------------------------------------------------------------------

def main(argv=None, bench=INFERENCE):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv, bench)
    if args.worker:
        return worker_main(args)
    t_start = time.perf_counter()
    cpu = cpu_info()
    env = {"cpu": cpu, "loadavg_start": list(os.getloadavg()),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "tracecache_version": tracecache_version(args.cli),
           "python": sys.executable, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    log(f"{cpu['model']}, {cpu['cores']} cores, peak {cpu['peak_gflops'] or 0:.0f} GFLOP/s; "
        f"load {env['loadavg_start'][0]:.2f}; tracecache {env['tracecache_version']}")
    gflops = {}
    results = []
    total = len(args.batch_list) * len(args.thread_list) * len(args.model_list)
    done = 0
    for threads in args.thread_list:
        for batch in args.batch_list:
            rows = []
            for model in args.model_list:
                done += 1
                log(f"[{done}/{total}] {model} batch {batch} threads {threads} "
                    f"(load {os.getloadavg()[0]:.2f})")
                if (model, batch) not in gflops:
                    try:
                        gflops[(model, batch)] = model_gflop(args, model, batch,
                                                             max(args.thread_list))
                    except Failure as e:
                        log(f"  {e}")
                        gflops[(model, batch)] = None
                row = measure(args, model, batch, threads, env)
                rows.append(finish_row(row, gflops[(model, batch)], threads_peak(cpu, threads),
                                       bench.torch_kinds))
                log("  " + ", ".join(f"{s} {row[s]['median_ms']:.2f} ms" for s in row
                                     if isinstance(row[s], dict) and "median_ms" in row[s])
                    + (f"; tc/best {row['ratio']:.2f}" if row.get("ratio") else "")
                    + "".join(f"; {s} FAILED" for s in row["errors"]))
                by = [f"{s} " + " / ".join(f"cpu {c}: {m:.2f}" for c, m in
                                           row[s]["median_ms_by_cpus"].items())
                      for s in row if isinstance(row[s], dict) and "median_ms_by_cpus" in row[s]]
                if by:
                    log("  by CPU (ms): " + "; ".join(by))
            ratios = [r["ratio"] for r in rows if r.get("ratio")]
            results.append({"batch": batch, "threads": threads, "rows": rows,
                            "geomean_ratio": geomean(ratios), "geomean_models": len(ratios)})
    env["loadavg_end"] = list(os.getloadavg())
    report = {
        "tool": bench.tool,
        "config": {"cli": args.cli, "models": args.model_list, "batches": args.batch_list,
                   "threads": args.thread_list, "steps": args.steps, "budget_s": args.budget,
                   "min_steps": args.min_steps, "max_steps": args.max_steps,
                   "rounds": args.rounds, "warmup": args.warmup, "tc_warmup": args.tc_warmup,
                   "settle_s": args.settle, "pin": args.pin,
                   "torch_wait_policies": args.policy_list,
                   "tc_wait_policies": args.tc_policy_list,
                   "seed": args.seed, "resolution": args.resolution, "seq_len": args.seq_len,
                   "step": bench.step, "torch_systems": bench.torch_kinds,
                   "torch_note": bench.torch_note, "zoo_command": bench.zoo_command,
                   "tc_lazy": args.tc_lazy, "quick": args.quick,
                   "flop_source": f"tracecache {SIM_DEVICE} cost model"},
        "env": env,
        "tables": results,
        "wall_s": time.perf_counter() - t_start,
    }
    torch_peer.emit_report(report, tables, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
