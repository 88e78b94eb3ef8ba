"""The per-call host cost of tracecache.torch's C++ path with its data in cache and out of it.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_host_cache.py [--calls 200] [--sweep-mb 64]

A compiled model's host overhead (a call's wall time minus the time the backend ran the graph)
is measured for 61 small linear layers (122 parameters, as many as resnet18 has, and a graph
that runs in microseconds): once with the calls back to back (the path's data stays in cache)
and once after reading --sweep-mb of other memory before each call (as a real model's kernels
do between two calls), and for resnet18 at 224x224 after its own kernels. Medians in µs, one
thread; a Markdown table on stdout (--json: the same as an object).
"""

import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--calls", type=int, default=200, help="timed calls per case (default 200)")
    ap.add_argument("--sweep-mb", type=int, default=64, help="memory read before each cold call (default 64)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args(argv)
    if a.calls < 1 or a.sweep_mb < 1:
        ap.error("--calls and --sweep-mb must be at least 1")
    import numpy as np
    import torch
    import torchvision
    import tracecache
    import tracecache.torch
    from tracecache.torch.bench import _host_us as host_us
    torch.set_num_threads(1)
    tracecache.configure(mode="once", no_cache=True, threads=1)
    junk = np.ones(a.sweep_mb * 1024 * 1024 // 4, dtype=np.float32)

    def sweep():
        junk.sum()

    def compiled(model, x):
        c = tracecache.torch.compile(model)
        for _ in range(3):
            c(x)
        return c

    torch.manual_seed(0)
    small = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(61)]).eval()
    xs = torch.randn(1, 4)
    cs = compiled(small, xs)
    resnet = torchvision.models.resnet18().eval()
    xr = torch.randn(1, 3, 224, 224)
    cr = compiled(resnet, xr)
    rows = {
        "61 linears (122 parameters), back to back": host_us(tracecache, cs, (xs,), a.calls),
        f"61 linears (122 parameters), after reading {a.sweep_mb} MB": host_us(tracecache, cs, (xs,), a.calls, sweep),
        "resnet18 224x224 (122 parameters), after its own kernels": host_us(tracecache, cr, (xr,), max(a.calls // 10, 1)),
    }
    if a.json:
        print(json.dumps({"host_us": rows, "calls": a.calls, "sweep_mb": a.sweep_mb}, indent=1))
        return 0
    print("| case | host µs/call (median) |\n| --- | ---: |")
    for k, v in rows.items():
        print(f"| {k} | {v:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
