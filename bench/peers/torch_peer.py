#!/usr/bin/python3
"""PyTorch 1.13 peer benchmark for tracecache.

Runs the ten tracecache zoo models (torchvision 0.14 constructors plus a hand-written
bert-base-uncased encoder) in three PyTorch modes and prints median step times:

  eager  the nn.Module called directly on CPU tensors
  jit    torch.jit.trace + torch.jit.freeze, warmed up (PyTorch's trace-once analogue)
  lazy   Lazy Tensor Core with the TorchScript backend: every step is traced on 'lazy'
         tensors, mark_step() hashes the pending graph, looks it up in the compile cache
         and runs it (PyTorch's trace-every-step analogue)

For lazy it also measures the host overhead per step: the step's wall time minus the time
spent inside the compiled TorchScript graph executions, taken from profiled steps and
corrected for the profiler's own per-event cost (see bench/peers/README.md).

Run with Debian's interpreter, which is the one that has python3-torch:
    /usr/bin/python3 bench/peers/torch_peer.py --models resnet18 --steps 5
    /usr/bin/python3 bench/peers/torch_peer.py --mlp
"""

import argparse
import ctypes
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings

MODELS = [
    "resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2",
    "mnasnet1_0", "squeezenet1_1", "vgg16", "vit_b_16", "bert_base",
]
MLP_MODELS = ["mlp", "mlp_nn"]
MODES = ["eager", "jit", "lazy"]

# Parameter counts of the reference architectures (torchvision 0.14 at 224x224; BertModel
# of bert-base-uncased with its pooler). A mismatch means a different model: abort.
EXPECTED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnext50_32x4d": 25_028_904,
    "alexnet": 61_100_840,
    "mobilenet_v2": 3_504_872,
    "mnasnet1_0": 4_383_312,
    "squeezenet1_1": 1_235_496,
    "vgg16": 138_357_544,
    "vit_b_16": 86_567_656,
    "bert_base": 109_482_240,
    "mlp": 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10,
    "mlp_nn": 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10,
}

MLP_BATCH = 8  # fixtures/programs/mlp.trace: dim B = 8

# Kernel names that tell which library does the heavy lifting in eager mode.
CONV_KERNELS = (
    "aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::thnn_conv2d",
    "aten::slow_conv_dilated2d", "aten::_nnpack_spatial_convolution",
    "aten::_conv_depthwise2d", "aten::_convolution_depthwise3x3_winograd",
)
GEMM_KERNELS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm",
                "aten::_native_multi_head_attention")

torch = None  # imported in main() so that --help works without PyTorch


def log(msg):
    print(f"[torch_peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Command line

def parse_args(argv):
    default_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    p = argparse.ArgumentParser(
        prog="torch_peer.py",
        description="PyTorch 1.13 peer of tracecache: median step time of the zoo models in "
                    "eager, jit (trace+freeze) and lazy (LTC TorchScript backend) modes, "
                    "plus LTC's host overhead per step. Run with /usr/bin/python3.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default=None,
                   help="comma-separated subset of: " + ", ".join(MODELS)
                   + " (default: all; with --mlp: " + ", ".join(MLP_MODELS) + ")")
    p.add_argument("--mlp", action="store_true",
                   help="instead of the zoo, run the 784-256-128-10 MLP + softmax "
                        "cross-entropy at batch 8 (fixtures/programs/mlp.trace op for op, "
                        "and the same with nn.Linear + F.cross_entropy); times in us")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: "
                   + ", ".join(MODES))
    p.add_argument("--steps", type=int, default=20, help="timed steps per model and mode")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps per model and mode before timing, after the first "
                        "call (jit and lazy get at least 2: profiling executor, compile)")
    p.add_argument("--rounds", type=int, default=4,
                   help="the timed steps are split into this many rounds that cycle "
                        "through the modes, so load drift on a shared machine hits every "
                        "mode alike")
    p.add_argument("--profile-steps", type=int, default=5,
                   help="extra lazy steps run under torch.profiler to split host overhead "
                        "from graph execution")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--resolution", type=int, default=224, help="image height and width")
    p.add_argument("--seq-len", type=int, default=128, help="BERT sequence length (<= 512)")
    p.add_argument("--threads", type=int, default=default_threads,
                   help="torch.set_num_threads and openblas_set_num_threads")
    p.add_argument("--no-mkldnn", action="store_true",
                   help="torch.backends.mkldnn.enabled = False: convolutions go through "
                        "im2col + OpenBLAS sgemm instead of oneDNN")
    p.add_argument("--omp-wait-policy", choices=["default", "passive", "active"],
                   default="default",
                   help="set OMP_WAIT_POLICY before loading PyTorch (libgomp's spinning "
                        "workers compete with OpenBLAS's pthreads on a small machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-lazy-mha-fix", action="store_true",
                   help="run nn.MultiheadAttention (vit_b_16) in lazy mode as PyTorch ships "
                        "it, which aborts LTC 1.13 (the model's lazy column is then empty)")
    p.add_argument("--in-process", action="store_true",
                   help="run every model in this process instead of one child process per "
                        "model (a crash in LTC then ends the whole run)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profiler-ns", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-index", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--child-total", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="machine-readable output: to stdout instead of the table (no PATH "
                        "or '-'), or to PATH in addition to the table")
    args = p.parse_args(argv)

    if args.models is None:
        args.model_list = MLP_MODELS if args.mlp else MODELS
    else:
        args.model_list = [m for m in args.models.split(",") if m]
    bad = [m for m in args.model_list if m not in MODELS + MLP_MODELS]
    if bad:
        p.error(f"unknown model(s): {', '.join(bad)}; choose from {', '.join(MODELS)}")
    args.mode_list = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.mode_list if m not in MODES]
    if bad or not args.mode_list:
        p.error(f"unknown mode(s): {', '.join(bad)}; choose from {', '.join(MODES)}")
    for name in ("steps", "rounds", "batch", "resolution", "seq_len", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0 or args.profile_steps < 0:
        p.error("--warmup and --profile-steps must be >= 0")
    if args.seq_len > 512:
        p.error("--seq-len must be <= 512 (BERT has 512 positions)")
    if "vit_b_16" in args.model_list and args.resolution % 16:
        p.error("vit_b_16 needs --resolution divisible by 16")
    args.rounds = min(args.rounds, args.steps)
    return args


# --------------------------------------------------------------------------------------
# Environment: threads and BLAS

def loaded_libraries():
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    libs.add(parts[5])
    except OSError:
        pass
    return sorted(libs)


def openblas_handle():
    for path in loaded_libraries():
        if "openblas" in os.path.basename(path) or "/openblas" in path:
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_config  # noqa: B018 -- raises if not OpenBLAS
                return path, lib
            except (OSError, AttributeError):
                continue
    return None, None


def configure_threads(n):
    torch.set_num_threads(n)
    path, lib = openblas_handle()
    if lib is not None and hasattr(lib, "openblas_set_num_threads"):
        lib.openblas_set_num_threads(ctypes.c_int(n))


def environment(args):
    show = torch.__config__.show()
    blas_line = next((seg.strip() for line in show.splitlines()
                      for seg in line.split(",") if "BLAS_INFO" in seg), "BLAS_INFO=?")
    pinfo = torch.__config__.parallel_info()
    backend = next((l.split(":", 1)[1].strip() for l in pinfo.splitlines()
                    if l.startswith("ATen parallel backend")), "?")
    blas_lib = next((p for p in loaded_libraries() if "libblas.so" in p), None)
    env = {
        "torch": torch.__version__,
        "torchvision": __import__("torchvision").__version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch_config_blas": blas_line,
        "libblas_so": os.path.realpath(blas_lib) if blas_lib else None,
        "aten_parallel_backend": backend,
        "aten_threads": torch.get_num_threads(),
        "aten_interop_threads": torch.get_num_interop_threads(),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "jit_cpu_fusion": bool(torch._C._jit_can_fuse_on_cpu()),
        "env_vars": {k: v for k, v in sorted(os.environ.items())
                     if k.startswith(("OMP_", "GOMP_", "OPENBLAS_", "MKL_", "KMP_"))},
        "loadavg_start": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    path, lib = openblas_handle()
    if lib is not None:
        lib.openblas_get_config.restype = ctypes.c_char_p
        env["openblas_library"] = path
        env["openblas_config"] = lib.openblas_get_config().decode()
        env["openblas_threads"] = lib.openblas_get_num_threads()
        if hasattr(lib, "openblas_get_parallel"):
            env["openblas_parallel"] = {0: "sequential", 1: "pthreads", 2: "openmp"}.get(
                lib.openblas_get_parallel(), "?")
    return env


def env_summary(env):
    blas = env.get("openblas_config")
    if blas:
        blas = (f"{blas.split(' NO_')[0].split(' DYNAMIC')[0]} ({env.get('openblas_parallel', '?')}, "
                f"{env['openblas_threads']} threads) via {env['libblas_so']}")
    else:
        blas = f"not OpenBLAS: {env['libblas_so']}"
    return [
        f"PyTorch {env['torch']}, torchvision {env['torchvision']}, Python {env['python']} "
        f"({env['executable']}), {env['cpus']} CPUs, {env['date']}",
        f"BLAS: {blas}; torch.__config__: {env['torch_config_blas']} (= system libblas.so.3)",
        f"threads: ATen intra-op {env['aten_threads']} ({env['aten_parallel_backend']}), "
        f"inter-op {env['aten_interop_threads']}; oneDNN conv "
        f"{'on' if env['mkldnn_enabled'] else 'off (--no-mkldnn)'}; OMP_WAIT_POLICY "
        f"{env['env_vars'].get('OMP_WAIT_POLICY', 'unset')}; "
        f"load average at start {' '.join(f'{x:.2f}' for x in env['loadavg_start'])}",
    ]


# --------------------------------------------------------------------------------------
# BERT-base (bert-base-uncased configuration), HuggingFace BertModel state_dict key names

def build_bert_classes():
    nn = torch.nn

    class Cfg:
        vocab_size = 30522
        hidden = 768
        layers = 12
        heads = 12
        intermediate = 3072
        max_positions = 512
        type_vocab = 2
        eps = 1e-12
        dropout = 0.1
        init_std = 0.02

    class BertEmbeddings(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden, padding_idx=0)
            self.position_embeddings = nn.Embedding(c.max_positions, c.hidden)
            self.token_type_embeddings = nn.Embedding(c.type_vocab, c.hidden)
            self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)
            self.dropout = nn.Dropout(c.dropout)
            # Not persistent: the state_dict holds only the 199 parameters.
            self.register_buffer("position_ids",
                                 torch.arange(c.max_positions).unsqueeze(0), persistent=False)

        def forward(self, input_ids, token_type_ids):
            seq = input_ids.shape[1]
            pos = self.position_ids[:, :seq]
            x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                 + self.position_embeddings(pos))
            return self.dropout(self.LayerNorm(x))

    class BertSelfAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.heads = c.heads
            self.head_dim = c.hidden // c.heads
            self.query = nn.Linear(c.hidden, c.hidden)
            self.key = nn.Linear(c.hidden, c.hidden)
            self.value = nn.Linear(c.hidden, c.hidden)
            self.dropout = nn.Dropout(c.dropout)

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

        def forward(self, x, mask_bias):
            q = self.split(self.query(x))
            k = self.split(self.key(x))
            v = self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = self.dropout(torch.softmax(scores + mask_bias, dim=-1))
            ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
            b, s = ctx.shape[0], ctx.shape[1]
            return ctx.view(b, s, self.heads * self.head_dim)

    class BertSelfOutput(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dense = nn.Linear(c.hidden, c.hidden)
            self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)
            self.dropout = nn.Dropout(c.dropout)

        def forward(self, h, residual):
            return self.LayerNorm(self.dropout(self.dense(h)) + residual)

    class BertAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.self = BertSelfAttention(c)
            self.output = BertSelfOutput(c)

        def forward(self, x, mask_bias):
            return self.output(self.self(x, mask_bias), x)

    class BertIntermediate(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dense = nn.Linear(c.hidden, c.intermediate)
            self.intermediate_act_fn = nn.GELU()  # exact (erf) GELU, as "gelu" in HF

        def forward(self, x):
            return self.intermediate_act_fn(self.dense(x))

    class BertOutput(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dense = nn.Linear(c.intermediate, c.hidden)
            self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)
            self.dropout = nn.Dropout(c.dropout)

        def forward(self, h, residual):
            return self.LayerNorm(self.dropout(self.dense(h)) + residual)

    class BertLayer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.attention = BertAttention(c)
            self.intermediate = BertIntermediate(c)
            self.output = BertOutput(c)

        def forward(self, x, mask_bias):
            a = self.attention(x, mask_bias)
            return self.output(self.intermediate(a), a)

    class BertEncoder(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.layer = nn.ModuleList([BertLayer(c) for _ in range(c.layers)])

        def forward(self, x, mask_bias):
            for layer in self.layer:
                x = layer(x, mask_bias)
            return x

    class BertPooler(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dense = nn.Linear(c.hidden, c.hidden)
            self.activation = nn.Tanh()

        def forward(self, x):
            return self.activation(self.dense(x[:, 0]))

    class BertModel(nn.Module):
        """bert-base-uncased: returns (sequence_output [B,S,768], pooled_output [B,768])."""

        def __init__(self, c=Cfg):
            super().__init__()
            self.embeddings = BertEmbeddings(c)
            self.encoder = BertEncoder(c)
            self.pooler = BertPooler(c)
            for m in self.modules():  # BERT's initializer: N(0, 0.02), zero biases
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=c.init_std)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
                if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                    with torch.no_grad():
                        m.weight[m.padding_idx].zero_()
                if isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, input_ids, token_type_ids, attention_mask):
            x = self.embeddings(input_ids, token_type_ids)
            # [B,S] 1/0 mask -> additive bias [B,1,1,S]: 0 where attended, dtype min where not
            mask = attention_mask[:, None, None, :].to(x.dtype)
            mask_bias = (1.0 - mask) * torch.finfo(x.dtype).min
            seq = self.encoder(x, mask_bias)
            return seq, self.pooler(seq)

    return BertModel


# --------------------------------------------------------------------------------------
# The MLP of fixtures/programs/mlp.trace

def build_mlp_classes():
    nn = torch.nn
    F = torch.nn.functional

    class FixtureMlp(nn.Module):
        """fixtures/programs/mlp.trace op for op: matmul/add/relu x3, then a stable
        log-softmax and a one-hot picked negative log-likelihood, mean over the batch."""

        def __init__(self):
            super().__init__()

            def uniform(shape, bound):
                return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))

            self.w1 = uniform((784, 256), 0.05)
            self.b1 = nn.Parameter(torch.zeros(256))
            self.w2 = uniform((256, 128), 0.08)
            self.b2 = nn.Parameter(torch.zeros(128))
            self.w3 = uniform((128, 10), 0.1)
            self.b3 = nn.Parameter(torch.zeros(10))

        def forward(self, x, labels):
            a1 = torch.relu(torch.add(torch.matmul(x, self.w1), self.b1))
            a2 = torch.relu(torch.add(torch.matmul(a1, self.w2), self.b2))
            logits = torch.add(torch.matmul(a2, self.w3), self.b3)
            # max(axes=[1], keepdim=true): torch.max(dim) rather than torch.amax, which
            # LTC 1.13 cannot lower (it would be a CPU fallback and a second graph)
            m = torch.max(logits, dim=1, keepdim=True).values
            shifted = torch.sub(logits, m)
            e = torch.exp(shifted)
            se = torch.sum(e, dim=1, keepdim=True)
            lse = torch.log(se)
            logp = torch.sub(shifted, lse)
            classes = torch.arange(10, device=x.device)
            lab = torch.reshape(labels, (x.shape[0], 1))
            hit = torch.eq(lab, classes)
            onehot = hit.to(torch.float32)
            picked = torch.mul(logp, onehot)
            ll = torch.sum(picked, dim=1)
            nll = torch.neg(ll)
            loss = torch.mean(nll)
            return logits, loss

    class NnMlp(nn.Module):
        """The same network written the usual PyTorch way."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                                     nn.ReLU(), nn.Linear(128, 10))

        def forward(self, x, labels):
            logits = self.net(x)
            return logits, F.cross_entropy(logits, labels)

    return FixtureMlp, NnMlp


# --------------------------------------------------------------------------------------
# Models and inputs

def build(name, args):
    """Returns (module in eval mode, tuple of example inputs, parameter count, note)."""
    torch.manual_seed(args.seed)
    note = ""
    if name == "bert_base":
        model = build_bert_classes()()
        g = torch.Generator().manual_seed(args.seed + 1)
        ids = torch.randint(1, 30522, (args.batch, args.seq_len), generator=g)
        inputs = (ids, torch.zeros_like(ids), torch.ones_like(ids))
    elif name in MLP_MODELS:
        fixture, nnmlp = build_mlp_classes()
        model = fixture() if name == "mlp" else nnmlp()
        g = torch.Generator().manual_seed(args.seed + 1)
        inputs = (torch.randn(MLP_BATCH, 784, generator=g),
                  torch.randint(0, 10, (MLP_BATCH,), generator=g))
    else:
        import torchvision
        kwargs = {"weights": None}
        if name == "vit_b_16" and args.resolution != 224:
            kwargs["image_size"] = args.resolution
            note = f"vit_b_16 built for {args.resolution}px: parameter count not checked"
        model = getattr(torchvision.models, name)(**kwargs)
        g = torch.Generator().manual_seed(args.seed + 1)
        inputs = (torch.randn(args.batch, 3, args.resolution, args.resolution, generator=g),)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    if not note:
        assert params == EXPECTED_PARAMS[name], \
            f"{name}: {params:,} parameters, expected {EXPECTED_PARAMS[name]:,}"
    return model, inputs, params, note


def kernel_probe(model, inputs):
    """One profiled eager step: which conv / gemm kernels PyTorch dispatched to."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(*inputs)
    counts = {}
    for e in prof.events():
        if e.name in CONV_KERNELS or e.name in GEMM_KERNELS:
            counts[e.name] = counts.get(e.name, 0) + 1
    return counts


# --------------------------------------------------------------------------------------
# Runners: prepare() builds the mode's callable, step() runs one step and returns ns

def now():
    return time.perf_counter_ns()


def flat_outputs(out):
    return [t for t in (out if isinstance(out, (tuple, list)) else [out])]


def max_rel_diff(out, ref):
    """max |out - ref| / max |ref| over all outputs (outputs moved to CPU)."""
    worst = 0.0
    for a, b in zip(flat_outputs(out), flat_outputs(ref)):
        a = a.to("cpu").double()
        b = b.double()
        worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    return worst


class EagerRunner:
    mode = "eager"

    def __init__(self, model, inputs):
        self.model, self.inputs = model, inputs
        self.info = {}

    def prepare(self):
        pass

    def check(self, ref):
        return max_rel_diff(self.model(*self.inputs), ref)

    def step(self):
        t0 = now()
        self.model(*self.inputs)
        return now() - t0


class JitRunner(EagerRunner):
    mode = "jit"

    def prepare(self):
        t0 = now()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about shape asserts
            traced = torch.jit.trace(self.model, self.inputs, check_trace=False)
        t1 = now()
        self.model = torch.jit.freeze(traced.eval())
        t2 = now()
        self.model(*self.inputs)
        t3 = now()
        self.info = {"trace_s": (t1 - t0) / 1e9, "freeze_s": (t2 - t1) / 1e9,
                     "first_call_s": (t3 - t2) / 1e9}


class TrainRunner(EagerRunner):
    """An eager training step as `tracecache zoo train` runs it (frontend/zoo/program.h): the
    model in train mode (batch statistics, dropout), the mean cross-entropy of its logits (BERT:
    of the pooler output, the model's last output) against fixed random labels, backward, and
    torch.optim.SGD (lr 0.01, momentum 0.9); a step ends with loss.item(). The zoo's BERT has
    no dropout on the attention probabilities, so neither has this one (it is swapped for the
    identity and noted in info)."""
    mode = "train"
    lr, momentum = 0.01, 0.9

    def prepare(self):
        self.model.train()
        dropped = 0
        for m in self.model.modules():
            if type(m).__name__ == "BertSelfAttention":  # build_bert_classes'
                m.dropout = torch.nn.Identity()
                dropped += 1
        if dropped:
            self.info["note"] = (f"attention-probability dropout removed from {dropped} layers "
                                 "(the zoo's BERT has none)")
        with torch.no_grad():
            classes = self.logits(self.model(*self.inputs)).shape[1]
        g = torch.Generator().manual_seed(2)
        self.labels = torch.randint(0, classes, (self.inputs[0].shape[0],), generator=g)
        self.info["classes"] = classes
        self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr, momentum=self.momentum)

    @staticmethod
    def logits(out):
        return out[-1] if isinstance(out, (tuple, list)) else out

    def step(self):
        t0 = now()
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.logits(self.model(*self.inputs)),
                                                 self.labels)
        loss.backward()
        self.opt.step()
        loss.item()
        return now() - t0


class LazyMhaFix:
    """LTC 1.13 aborts on nn.MultiheadAttention: its packed in-projection ends in
    linear(...).chunk(3, dim=-1); chunk becomes split_copy, which LTC runs as a CPU
    fallback that hands back non-lazy tensors, and the next lazy op dies on a glog CHECK
    ('Input tensor is not a lazy tensor: CPUFloatType', tensor.cpp:498). While a lazy step
    runs, this swaps in the same computation written as three slices, which LTC lowers.
    Used only for models that contain nn.MultiheadAttention (vit_b_16), and reported."""

    def __init__(self):
        self.calls = 0
        F = torch.nn.functional
        self.orig = F._in_projection_packed

        def packed(q, k, v, w, b=None):
            if q is k and k is v:
                self.calls += 1
                e = q.size(-1)
                proj = F.linear(q, w, b)
                return proj[..., :e], proj[..., e:2 * e], proj[..., 2 * e:]
            return self.orig(q, k, v, w, b)

        self.packed = packed

    def __enter__(self):
        torch.nn.functional._in_projection_packed = self.packed

    def __exit__(self, *exc):
        torch.nn.functional._in_projection_packed = self.orig


class LazyRunner:
    """LTC TorchScript backend. A step: forward on lazy tensors (recorded, not run), then
    mark_step() (hash the pending graph, compile-cache lookup, run it) and
    wait_device_ops(). With the TS backend the graph runs synchronously inside mark_step."""
    mode = "lazy"

    mha_fix_enabled = True

    def __init__(self, model, inputs):
        import copy
        self.src_model, self.src_inputs = model, inputs
        self.copy = copy
        self.trace_ns, self.sync_ns = [], []
        self.counters = {}
        self.info = {}
        has_mha = any(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules())
        self.mha_fix = LazyMhaFix() if has_mha and self.mha_fix_enabled else None

    def check(self, ref):
        out = self.forward()
        torch._lazy.mark_step()
        torch._lazy.wait_device_ops()
        return max_rel_diff(out, ref)

    def check_submodules(self):
        """Lazy vs eager per top-level submodule output: catches what the final output can
        hide (torchvision zero-initializes vit_b_16's head, so its logits are all 0)."""
        seen = {"eager": {}, "lazy": {}}
        hooks = []
        for tag, model in (("eager", self.src_model), ("lazy", self.model)):
            for name, child in model.named_children():
                def hook(mod, inp, out, name=name, tag=tag):
                    if isinstance(out, torch.Tensor):
                        seen[tag][name] = out
                hooks.append(child.register_forward_hook(hook))
        try:
            self.src_model(*self.src_inputs)
            self.forward()
            torch._lazy.mark_step()
            torch._lazy.wait_device_ops()
        finally:
            for h in hooks:
                h.remove()
        return {name: max_rel_diff(seen["lazy"][name], ref)
                for name, ref in seen["eager"].items()
                if name in seen["lazy"] and ref.abs().max() > 0}

    def forward(self):
        if self.mha_fix is None:
            return self.model(*self.inputs)
        with self.mha_fix:
            return self.model(*self.inputs)

    def prepare(self):
        lazy = torch._lazy
        t0 = now()
        self.model = self.copy.deepcopy(self.src_model).to("lazy")
        self.inputs = tuple(x.to("lazy") for x in self.src_inputs)
        lazy.mark_step()  # materialize parameters and inputs as device data
        lazy.wait_device_ops()
        t1 = now()
        c0 = counter_snapshot()
        self.step()
        t2 = now()
        c1 = counter_snapshot()
        self.trace_ns.clear()
        self.sync_ns.clear()
        self.info = {"upload_s": (t1 - t0) / 1e9, "first_step_s": (t2 - t1) / 1e9,
                     "first_step_compiles": c1.get("UncachedCompile", 0)
                     - c0.get("UncachedCompile", 0)}
        if self.mha_fix is not None:
            self.info["mha_chunk_as_slices_per_step"] = self.mha_fix.calls

    def step(self):
        lazy = torch._lazy
        t0 = now()
        out = self.forward()
        t1 = now()
        lazy.mark_step()
        lazy.wait_device_ops()
        t2 = now()
        del out
        self.trace_ns.append(t1 - t0)
        self.sync_ns.append(t2 - t1)
        return t2 - t0

    def timed(self, n):
        c0 = counter_snapshot()
        times = [self.step() for _ in range(n)]
        c1 = counter_snapshot()
        for k in set(c0) | set(c1):
            d = c1.get(k, 0) - c0.get(k, 0)
            if d:
                self.counters[k] = self.counters.get(k, 0) + d
        return times

    def graph_probe(self):
        """Nodes of the final pending graph and the time to hash it (one extra step)."""
        out = self.forward()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        text = torch._C._lazy._get_tensors_text(outs)
        lines = [l for l in text.splitlines() if l.strip().startswith("%")]
        data = sum(1 for l in lines if "device_data" in l)
        hashes = []
        for _ in range(5):
            t0 = now()
            torch._C._lazy._get_graph_hash(outs)
            hashes.append(now() - t0)
        torch._lazy.mark_step()
        torch._lazy.wait_device_ops()
        return {"final_graph_nodes": len(lines) - data, "final_graph_device_data": data,
                "final_graph_hash_ms": statistics.median(hashes) / 1e6}

    def profiled(self, n, per_event_ns, fallback_ops):
        """Medians over n profiled steps of split_profile's categories."""
        from torch.profiler import profile, record_function, ProfilerActivity
        rows = []
        for _ in range(n):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                with record_function("tc::forward"):
                    out = self.forward()
                with record_function("tc::sync"):
                    torch._lazy.mark_step()
                    torch._lazy.wait_device_ops()
            del out
            rows.append(split_profile(prof.events(), per_event_ns, fallback_ops))
        keys = rows[0].keys() if rows else []
        return {k: statistics.median(r[k] for r in rows) for k in keys}


def counter_snapshot():
    import torch._lazy.metrics as metrics
    return {n: metrics.counter_value(n) for n in metrics.counter_names()}


def split_profile(events, per_event_ns, fallback_ops):
    """Splits one profiled lazy step into graph execution, CPU-fallback round trips and
    host time.

    Graph execution = the TorchScript GraphExecutor runs: the profiler's events with an
    empty name, one per executed lazy graph (in mark_step, and in the syncs that CPU
    fallbacks force during the forward call). Fallback = the outermost events of ops that
    LTC runs on CPU (counter names 'aten::<op>'), minus the graph runs inside them: their
    syncs' bookkeeping, the copies to and from the lazy device, the CPU kernel. Host = all
    the rest of the step. Each profiler event outside the graph runs costs the profiler
    per_event_ns, which is removed from the category it falls in."""
    phases = {e.name: e for e in events if e.name in ("tc::forward", "tc::sync")}
    runs = []
    for s, t in sorted((e.time_range.start, e.time_range.end) for e in events if e.name == ""):
        if runs and s <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], t)
        else:
            runs.append([s, t])

    def run_us(a, b):
        return sum(min(t, b) - max(s, a) for s, t in runs if s < b and t > a)

    def in_run(e):
        return any(s <= e.time_range.start and e.time_range.end <= t for s, t in runs)

    def within(e, a, b):
        return a <= e.time_range.start and e.time_range.end <= b

    names = set()
    for op in fallback_ops:
        names.update((op, op + "_"))

    def outermost_fallback(e):
        if e.name not in names:
            return False
        p = e.cpu_parent
        while p is not None:
            if p.name in names:
                return False
            p = p.cpu_parent
        return True

    counted = [e for e in events if e.name not in ("tc::forward", "tc::sync", "")
               and not in_run(e)]
    row = {}
    for key, name in (("forward", "tc::forward"), ("sync", "tc::sync")):
        ph = phases[name]
        a, b = ph.time_range.start, ph.time_range.end
        fb_us, fb_events = 0.0, 0
        for e in events:
            if within(e, a, b) and outermost_fallback(e):
                s, t = e.time_range.start, e.time_range.end
                fb_us += (t - s) - run_us(s, t)
                fb_events += sum(1 for c in counted if within(c, s, t))
        n_events = sum(1 for c in counted if within(c, a, b))
        wall_us, exec_us = b - a, run_us(a, b)
        row[f"{key}_wall_ms"] = wall_us / 1e3
        row[f"{key}_graph_run_ms"] = exec_us / 1e3
        row[f"{key}_fallback_ms"] = fb_us / 1e3 - fb_events * per_event_ns / 1e6
        row[f"{key}_host_ms"] = ((wall_us - exec_us - fb_us) / 1e3
                                 - (n_events - fb_events) * per_event_ns / 1e6)
        row[f"{key}_profiler_events"] = n_events
    row["graph_runs"] = len(runs)
    row["graph_run_ms"] = row["forward_graph_run_ms"] + row["sync_graph_run_ms"]
    row["fallback_ms"] = row["forward_fallback_ms"] + row["sync_fallback_ms"]
    row["host_ms"] = row["forward_host_ms"] + row["sync_host_ms"]
    return row


def calibrate_profiler(reps=15, ops=400):
    """Per-event cost of torch.profiler on lazy op dispatch: trace a chain of lazy
    elementwise ops with and without the profiler (nothing syncs, so nothing runs).
    Minimum over reps on both sides: the uncontended cost on a shared machine."""
    from torch.profiler import profile, ProfilerActivity
    x0 = torch.zeros(16).to("lazy")
    torch._lazy.mark_step()
    n_ops = 3 * (ops // 3)

    def chain():
        x = x0
        for _ in range(ops // 3):
            x = torch.relu(torch.add(torch.mul(x, x0), x0))
        return x

    plain, profiled = [], []
    for _ in range(reps):
        t0 = now()
        y = chain()
        plain.append(now() - t0)
        del y
        torch._lazy.mark_step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = now()
            y = chain()
            t1 = now()
        profiled.append((t1 - t0, len(prof.events())))
        del y
        torch._lazy.mark_step()
    base = min(plain)
    t, n = min(profiled)
    return max((t - base) / max(n, 1), 0.0), base / n_ops


# --------------------------------------------------------------------------------------
# Measurement driver

def summarize(ns):
    ms = sorted(x / 1e6 for x in ns)
    q = lambda f: ms[min(len(ms) - 1, int(f * (len(ms) - 1) + 0.5))]  # noqa: E731
    return {"median_ms": statistics.median(ms), "p10_ms": q(0.1), "p90_ms": q(0.9),
            "min_ms": ms[0], "steps": len(ms)}


def run_model(name, args, per_event_ns, index, total):
    tag = f"[{index}/{total}] {name}"
    log(f"{tag}: building")
    model, inputs, params, note = build(name, args)
    result = {"model": name, "params": params, "inputs": [list(x.shape) for x in inputs],
              "loadavg_start": list(os.getloadavg())}
    if note:
        result["note"] = note
    ref = model(*inputs)
    result["outputs_all_zero"] = all(float(t.abs().max()) == 0 for t in flat_outputs(ref))
    result["eager_kernels"] = kernel_probe(model, inputs)

    runners = []
    for mode in args.mode_list:
        r = {"eager": EagerRunner, "jit": JitRunner, "lazy": LazyRunner}[mode](model, inputs)
        t0 = time.perf_counter()
        r.prepare()
        r.info["max_rel_diff_vs_eager"] = r.check(ref)
        if mode == "lazy":
            r.info["submodule_max_rel_diff_vs_eager"] = r.check_submodules()
        warm = args.warmup if mode == "eager" else max(args.warmup, 2)
        for _ in range(warm):
            r.step()
        if mode == "lazy":
            r.trace_ns.clear()
            r.sync_ns.clear()
        log(f"{tag} {mode}: ready in {time.perf_counter() - t0:.1f} s "
            f"({' '.join(f'{k}={v:.3g}' for k, v in r.info.items() if isinstance(v, (int, float)))})")
        runners.append(r)

    times = {r.mode: [] for r in runners}
    per_round = [args.steps // args.rounds + (1 if i < args.steps % args.rounds else 0)
                 for i in range(args.rounds)]
    for i, n in enumerate(per_round):
        for r in runners:
            times[r.mode] += r.timed(n) if r.mode == "lazy" else [r.step() for _ in range(n)]
        log(f"{tag}: round {i + 1}/{args.rounds}: " + ", ".join(
            f"{m} {statistics.median(t) / 1e6:.3f} ms" for m, t in times.items()))

    for r in runners:
        entry = summarize(times[r.mode])
        entry.update(r.info)
        if r.mode == "lazy":
            steps = len(times["lazy"])
            # wall times of the two halves of a step (unprofiled, medians)
            entry["forward_call_ms"] = statistics.median(r.trace_ns) / 1e6
            entry["mark_step_ms"] = statistics.median(r.sync_ns) / 1e6
            c = r.counters
            entry["per_step"] = {
                "graphs_run": (c.get("CachedCompile", 0) + c.get("UncachedCompile", 0)) / steps,
                "compiles": c.get("UncachedCompile", 0) / steps,
                "lazy_ops": sum(v for k, v in c.items() if k.startswith("lazy::")) / steps,
                "fallback_ops": sum(v for k, v in c.items() if k.startswith("aten::")) / steps,
            }
            entry["fallbacks"] = {k: v / steps for k, v in sorted(c.items())
                                  if k.startswith("aten::")}
            entry["counters"] = dict(sorted(c.items()))
            entry.update(r.graph_probe())
            if args.profile_steps:
                prof = r.profiled(args.profile_steps, per_event_ns, list(entry["fallbacks"]))
                entry["profiled"] = prof
                if not entry["fallbacks"] and prof["forward_graph_run_ms"] == 0:
                    # nothing runs during the forward call: it is all tracing, measured
                    # directly without the profiler
                    entry["trace_host_ms"] = entry["forward_call_ms"]
                    entry["trace_host_source"] = "forward call wall time, unprofiled"
                else:
                    entry["trace_host_ms"] = prof["forward_host_ms"]
                    entry["trace_host_source"] = "profiled steps, profiler cost removed"
                entry["sync_host_ms"] = prof["sync_host_ms"]
                entry["host_overhead_ms"] = entry["trace_host_ms"] + entry["sync_host_ms"]
                entry["fallback_ms"] = prof["fallback_ms"]
                # every executed graph must have been seen as a GraphExecutor run
                entry["profiled_graph_runs_match_counters"] = (
                    round(prof["graph_runs"]) == round(entry["per_step"]["graphs_run"]))
            log(f"{tag} lazy: host overhead "
                f"{entry.get('host_overhead_ms', float('nan')):.3f} ms/step, "
                f"{entry['per_step']['graphs_run']:.0f} graph(s)/step, "
                f"{entry['per_step']['fallback_ops']:.0f} fallback op(s)/step")
        result[r.mode] = entry
    if "jit" in result and "lazy" in result:
        result["lazy_over_jit"] = result["lazy"]["median_ms"] / result["jit"]["median_ms"]
    del runners, model
    return result


def run_model_in_child(name, args, per_event_ns, index, total):
    """run_model in a fresh interpreter: an abort inside LTC (glog CHECK) costs only that
    model's lazy column; each model also starts with empty LTC caches and a clean heap."""
    import subprocess
    modes = list(args.mode_list)
    errors = {}
    while modes:
        argv = [sys.executable, os.path.abspath(__file__), "--child",
                "--models", name, "--modes", ",".join(modes),
                "--profiler-ns", repr(per_event_ns), "--child-index", str(index),
                "--child-total", str(total)]
        for opt in ("steps", "warmup", "rounds", "profile_steps", "batch", "resolution",
                    "seq_len", "threads", "seed", "omp_wait_policy"):
            argv += ["--" + opt.replace("_", "-"), str(getattr(args, opt))]
        for flag in ("no_mkldnn", "no_lazy_mha_fix", "mlp"):
            if getattr(args, flag):
                argv.append("--" + flag.replace("_", "-"))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        tail = []
        for line in proc.stderr:
            sys.stderr.write(line)
            tail = (tail + [line.rstrip()])[-12:]
        out = proc.stdout.read()
        code = proc.wait()
        if code == 0:
            result = json.loads(out.strip().splitlines()[-1])
            if errors:
                result["errors"] = errors
            return result
        reason = next((l for l in reversed(tail) if "Check failed" in l or "Error" in l),
                      tail[-1] if tail else f"exit code {code}")
        failed = "lazy" if "lazy" in modes else modes[-1]
        errors[failed] = f"child process died (exit code {code}): {reason.strip()}"
        log(f"[{index}/{total}] {name}: {failed} crashed ({reason.strip()}); "
            f"retrying without it")
        modes.remove(failed)
    return {"model": name, "errors": errors}


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomeans(results, modes):
    """Over the models that have every measured mode, so the columns stay comparable."""
    results = [r for r in results if all(r.get(m, {}).get("median_ms") for m in modes)]
    g = {"models": [r["model"] for r in results]}
    for mode in MODES:
        g[mode] = geomean([r.get(mode, {}).get("median_ms") for r in results])
    g["lazy_over_jit"] = geomean([r.get("lazy_over_jit") for r in results])
    g["host_overhead_ms"] = geomean([r.get("lazy", {}).get("host_overhead_ms")
                                     for r in results])
    return g


# --------------------------------------------------------------------------------------
# Output

def table(report):
    args = report["config"]
    us = args["mlp"]
    scale, unit = (1e3, "us") if us else (1.0, "ms")
    step_digits, small_digits = (1, 1) if us else (2, 3)
    out = env_summary(report["env"])
    if us:
        out.append(f"MLP 784-256-128-10 + softmax cross-entropy, batch {MLP_BATCH}; "
                   f"mlp = fixtures/programs/mlp.trace op for op, mlp_nn = nn.Linear + "
                   f"F.cross_entropy")
    else:
        out.append(f"batch {args['batch']}, resolution {args['resolution']}, BERT seq-len "
                   f"{args['seq_len']}")
    out.append(f"median step time over {args['steps']} steps ({args['rounds']} rounds cycling "
               f"the modes) after {args['warmup']} warm-up steps; lazy host split from "
               f"{args['profile_steps']} profiled steps (profiler cost "
               f"{report['profiler_ns_per_event']:.0f} ns/event removed)")
    out.append("")

    # (header, width, value(result) -> float|None, format)
    def num(digits, s=scale):
        return lambda v: f"{v * s:.{digits}f}"

    cols = [
        ("model", 16, lambda r: r["model"], str),
        (f"eager {unit}", 10, lambda r: r.get("eager", {}).get("median_ms"), num(step_digits)),
        (f"jit {unit}", 10, lambda r: r.get("jit", {}).get("median_ms"), num(step_digits)),
        (f"lazy {unit}", 10, lambda r: r.get("lazy", {}).get("median_ms"), num(step_digits)),
        ("lazy/jit", 8, lambda r: r.get("lazy_over_jit"), lambda v: f"{v:.2f}x"),
        (f"host {unit}", 10, lambda r: r.get("lazy", {}).get("host_overhead_ms"),
         num(small_digits)),
        ("trace", 9, lambda r: r.get("lazy", {}).get("trace_host_ms"), num(small_digits)),
        ("sync", 8, lambda r: r.get("lazy", {}).get("sync_host_ms"), num(small_digits)),
        ("host %", 6, lambda r: (100 * r["lazy"]["host_overhead_ms"] / r["lazy"]["median_ms"]
                                 if r.get("lazy", {}).get("host_overhead_ms") is not None
                                 else None), lambda v: f"{v:.1f}%"),
        (f"fallbk {unit}", 10, lambda r: r.get("lazy", {}).get("fallback_ms"),
         num(small_digits)),
        ("graphs", 6, lambda r: r.get("lazy", {}).get("per_step", {}).get("graphs_run"),
         lambda v: f"{v:g}"),
        ("fb ops", 6, lambda r: r.get("lazy", {}).get("per_step", {}).get("fallback_ops"),
         lambda v: f"{v:g}"),
        ("lazy ops", 8, lambda r: r.get("lazy", {}).get("per_step", {}).get("lazy_ops"),
         lambda v: f"{v:g}"),
    ]

    def line(r):
        cells = []
        for i, (_, width, get, form) in enumerate(cols):
            try:
                v = get(r)
            except (KeyError, TypeError, ZeroDivisionError):
                v = None
            text = "-" if v is None or (isinstance(v, float) and math.isnan(v)) else form(v)
            cells.append(text.ljust(width) if i == 0 else text.rjust(width))
        return " ".join(cells)

    hdr = " ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w, _, _) in enumerate(cols))
    out += [hdr, "-" * len(hdr)]
    out += [line(r) for r in report["results"]]
    if len(report["results"]) > 1:
        g = report["geomean"]
        out.append("-" * len(hdr))
        out.append(line({"model": f"geomean (n={len(g['models'])})", "eager": {"median_ms": g["eager"]},
                         "jit": {"median_ms": g["jit"]}, "lazy_over_jit": g["lazy_over_jit"],
                         "lazy": {"median_ms": g["lazy"],
                                  "host_overhead_ms": g["host_overhead_ms"]}}))
    out.append("")
    out.append("lazy/jit = lazy step / jit step (>1: tracing once beats tracing every step). "
               "host = lazy step time spent on the host, not in compiled-graph runs nor "
               "CPU fallbacks: trace (recording the forward call's ops as IR) + sync "
               "(mark_step: graph hash, compile-cache lookup, device-data handles). "
               "fallbk = round trips of ops LTC cannot lower (their syncs, copies, CPU "
               "kernel). graphs, fb ops, lazy ops: per step.")
    for r in report["results"]:
        lz = r.get("lazy", {})
        notes = []
        if r.get("eager_kernels"):
            notes.append("eager kernels " + ", ".join(
                f"{k.replace('aten::', '')} x{v}" for k, v in sorted(r["eager_kernels"].items())))
        diffs = [f"{m} {r[m]['max_rel_diff_vs_eager']:.1g}" for m in ("jit", "lazy")
                 if "max_rel_diff_vs_eager" in r.get(m, {})]
        if r.get("outputs_all_zero"):
            diffs.append("(the model's outputs are all zero)")
        subs = lz.get("submodule_max_rel_diff_vs_eager")
        if subs:
            diffs.append(f"lazy per top-level submodule {max(subs.values()):.1g} "
                         f"(over {len(subs)})")
        if diffs:
            notes.append("outputs vs eager, max rel diff: " + ", ".join(diffs))
        if lz.get("fallbacks"):
            notes.append("lazy CPU fallbacks/step " + ", ".join(
                f"{k.replace('aten::', '')} x{v:g}" for k, v in lz["fallbacks"].items()))
        if lz.get("profiled_graph_runs_match_counters") is False:
            notes.append("WARNING: profiled graph runs differ from LTC's compile counters; "
                         "host split unreliable")
        if lz and lz.get("per_step", {}).get("compiles"):
            notes.append(f"lazy compiles in timed steps: {lz['per_step']['compiles']:g}/step")
        if "final_graph_nodes" in lz:
            notes.append(f"final lazy graph {lz['final_graph_nodes']} op nodes + "
                         f"{lz['final_graph_device_data']} device data, hashed in "
                         f"{lz['final_graph_hash_ms'] * scale:.{small_digits}f} {unit}")
        if lz.get("trace_host_source", "").startswith("profiled"):
            notes.append("lazy trace from the profiled steps (the forward call also runs "
                         "graphs and fallbacks)")
        if lz.get("mha_chunk_as_slices_per_step"):
            notes.append(f"lazy runs nn.MultiheadAttention with chunk() written as slices "
                         f"({lz['mha_chunk_as_slices_per_step']}x/step; LTC 1.13 aborts on "
                         f"the original, see --no-lazy-mha-fix)")
        for mode, err in r.get("errors", {}).items():
            notes.append(f"{mode} FAILED: {err}")
        if r.get("note"):
            notes.append(r["note"])
        if notes:
            out.append(f"  {r['model']}: " + "; ".join(notes))
    env = report["env"]
    out.append(f"load average at end {' '.join(f'{x:.2f}' for x in env['loadavg_end'])}; "
               f"total {report['wall_s']:.0f} s")
    return "\n".join(out)


# --------------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    global torch
    if args.omp_wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    try:
        import torch as _torch
    except ImportError:
        sys.exit("torch_peer: cannot import torch; run with /usr/bin/python3 after "
                 "scripts/setup.sh --peers")
    torch = _torch

    t_start = time.perf_counter()
    configure_threads(args.threads)
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    torch.set_grad_enabled(False)
    env = environment(args)
    if not args.child:
        for line in env_summary(env):
            log(line)

    per_event_ns = 0.0
    if args.profiler_ns is not None:
        per_event_ns = args.profiler_ns
        if "lazy" in args.mode_list:
            import torch._lazy
            import torch._lazy.ts_backend
            import torch._lazy.metrics  # noqa: F401
            torch._lazy.ts_backend.init()
    elif "lazy" in args.mode_list:
        import torch._lazy
        import torch._lazy.ts_backend
        import torch._lazy.metrics  # noqa: F401
        torch._lazy.ts_backend.init()
        if args.profile_steps:
            per_event_ns, _ = calibrate_profiler()
            log(f"profiler cost on lazy dispatch: {per_event_ns:.0f} ns per event")

    LazyRunner.mha_fix_enabled = not args.no_lazy_mha_fix
    if args.child:
        result = run_model(args.model_list[0], args, per_event_ns, args.child_index,
                           args.child_total)
        print(json.dumps(result), flush=True)
        return 0

    results = []
    for i, name in enumerate(args.model_list, 1):
        if args.in_process:
            results.append(run_model(name, args, per_event_ns, i, len(args.model_list)))
        else:
            results.append(run_model_in_child(name, args, per_event_ns, i,
                                              len(args.model_list)))

    env["loadavg_end"] = list(os.getloadavg())
    report = {
        "tool": "bench/peers/torch_peer.py",
        "config": {k: getattr(args, k) for k in (
            "mlp", "steps", "warmup", "rounds", "profile_steps", "batch", "resolution",
            "seq_len", "threads", "no_mkldnn", "omp_wait_policy", "seed")} | {
            "models": args.model_list, "modes": args.mode_list},
        "env": env,
        "profiler_ns_per_event": per_event_ns,
        "results": results,
        "geomean": geomeans(results, args.mode_list),
        "wall_s": time.perf_counter() - t_start,
    }
    emit_report(report, table, args.json)
    return 0


def emit_report(report, render, json_arg):
    """Prints render(report) unless --json went to stdout (json_arg "-"), and the report as
    JSON to stdout or to the file json_arg names (None: no JSON). Shared with side_by_side.py."""
    if json_arg != "-":
        print(render(report), flush=True)
    if json_arg:
        text = json.dumps(report, indent=1)
        if json_arg == "-":
            print(text)
        else:
            with open(json_arg, "w") as f:
                f.write(text + "\n")
            log(f"wrote {json_arg}")


if __name__ == "__main__":
    sys.exit(main())
