#!/usr/bin/python3
"""QDQ (int8) against f32 through `tracecache run MODEL.onnx`: a torchvision model exported to
ONNX twice, as f32 and QDQ-quantized by tests/python/qdq_models.py (u8 activations per tensor,
i8 weights per channel), each run in once mode on the cpu backend; prints the median step time
of each, the QDQ model's max difference to the f32 logits and its top-1 agreement with them, and
the same against PyTorch running the fake-quantized model (the QDQ oracle).

Usage: /usr/bin/python3 bench/qdq_speed.py [--models resnet18,mobilenet_v2] [--batch 1]
       [--steps 20] [--threads 1] [--json out.json]
Needs build/cli/tracecache (or $TRACECACHE_CLI). Not a test: nothing here is asserted."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import qdq_models  # noqa: E402

CLI = os.environ.get("TRACECACHE_CLI", os.path.join(ROOT, "build", "cli", "tracecache"))
MODELS = {"resnet18", "resnet50", "mobilenet_v2", "resnext50_32x4d"}


def run(model, x_path, out, steps, threads):
    r = subprocess.run([CLI, "run", model, "--input", f"x={x_path}", "--no-cache", "--mode", "once",
                        "--steps", str(steps), "--threads", str(threads), "--save-outputs", out, "--json", "-q"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qdq_speed: tracecache run {model} failed: {r.stderr.strip()}")
    step_ms = json.loads(r.stdout)["step_ms"]
    return float(np.median(step_ms[1:] if len(step_ms) > 1 else step_ms)), np.load(os.path.join(out, "step0_y.npy"))


def measure(name, batch, steps, threads):
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        f32_logits = net(x).numpy()
    row = {"model": name, "batch": batch, "threads": threads}
    with tempfile.TemporaryDirectory() as d:
        x_path = os.path.join(d, "x.npy")
        np.save(x_path, x.numpy())
        f32_path = os.path.join(d, "f32.onnx")
        with torch.no_grad():
            torch.onnx.export(net, x, f32_path, opset_version=13, input_names=["x"], output_names=["y"])
        print(f"{name}: calibrating and exporting the QDQ model", file=sys.stderr)
        qnet = qdq_models.quantize(net, [torch.randn(batch, 3, 224, 224) for _ in range(2)])
        with torch.no_grad():
            oracle = qnet(x).numpy()
        qdq_path = os.path.join(d, "qdq.onnx")
        row["qdq_nodes"] = qdq_models.export_qdq(qnet, x, qdq_path)
        print(f"{name}: running f32 and QDQ, {steps} steps each", file=sys.stderr)
        row["f32_ms"], f32_out = run(f32_path, x_path, os.path.join(d, "f32"), steps, threads)
        row["qdq_ms"], qdq_out = run(qdq_path, x_path, os.path.join(d, "qdq"), steps, threads)
    row["speedup"] = row["f32_ms"] / row["qdq_ms"]
    row["f32_vs_torch_max_abs"] = float(np.abs(f32_out - f32_logits).max())
    row["qdq_vs_f32_max_abs"] = float(np.abs(qdq_out - f32_logits).max())
    row["qdq_vs_f32_top1"] = float((qdq_out.argmax(-1) == f32_logits.argmax(-1)).mean())
    row["qdq_vs_oracle_max_abs"] = float(np.abs(qdq_out - oracle).max())
    row["logit_range"] = float(f32_logits.max() - f32_logits.min())
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    a = p.parse_args()
    names = [m for m in a.models.split(",") if m]
    bad = [m for m in names if m not in MODELS]
    if bad or a.batch < 1 or a.steps < 2 or a.threads < 1:
        print(f"qdq_speed: unknown models {bad} (known: {sorted(MODELS)}) or batch/threads < 1 or steps < 2",
              file=sys.stderr)
        sys.exit(2)
    rows = [measure(m, a.batch, a.steps, a.threads) for m in names]
    print(f"{'model':16} {'f32 ms':>8} {'QDQ ms':>8} {'f32/QDQ':>8} {'QDQ-f32 max':>12} {'top-1':>6} "
          f"{'QDQ-oracle max':>15} {'logit range':>12}")
    for r in rows:
        print(f"{r['model']:16} {r['f32_ms']:8.2f} {r['qdq_ms']:8.2f} {r['speedup']:8.2f} "
              f"{r['qdq_vs_f32_max_abs']:12.4f} {r['qdq_vs_f32_top1']:6.2f} {r['qdq_vs_oracle_max_abs']:15.5f} "
              f"{r['logit_range']:12.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
