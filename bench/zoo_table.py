#!/usr/bin/env python3
"""Markdown tables from `tracecache bench --json` (its `summary` and `geomean`).

    bench/zoo_table.py bench/results/zoo-cpu-2026-11-22.json
    bench/zoo_table.py bench/results/zoo-sim-h100-2026-11-22.json
    bench/zoo_table.py --peer bench/peers/results-2026-11-22.json bench/results/zoo-cpu-2026-11-22.json

Times in the JSON are microseconds; step times are printed in ms, host overheads in us.
With --peer, a table of tracecache's cpu step times against PyTorch's (torch_peer.py --json).
"""
import argparse
import json
import math


def ms(us):
    return "-" if us is None else f"{us / 1000:.2f}"


def us(v):
    return "-" if v is None else f"{v:.1f}"


def ratio(v):
    return "-" if v is None else f"{v:.2f}x"


def summary_table(d):
    sim = d.get("summary_step_time") == "simulated"
    modes = [m for m in ("eager", "lazy", "once") if any(s[f"{m}_step_us"] is not None for s in d["summary"])]
    head = ["model"] + [f"{m} step ms" for m in modes]
    head += [f"{m} {'host' if sim else 'overhead'} µs" for m in ("lazy", "once")]
    if sim:
        for m in ("lazy", "once"):
            head += [f"{m} device busy ms", f"{m} device idle ms"]
    head += ["host once/lazy" if sim else "overhead once/lazy", "step once/lazy"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for s in d["summary"]:
        row = [s["target"]] + [ms(s[f"{m}_step_us"]) for m in modes]
        row += [us(s["lazy_overhead_us"]), us(s["once_overhead_us"])]
        if sim:
            for m in ("lazy", "once"):
                row += [ms(s[f"{m}_device_busy_us"]), ms(s[f"{m}_device_idle_us"])]
        row += [ratio(s["overhead_once_vs_lazy"]), ratio(s["step_once_vs_lazy"])]
        lines.append("| " + " | ".join(row) + " |")
    g = d["geomean"]
    row = [f"**geomean** ({g['targets']})"] + [""] * (len(head) - 3)
    row += [f"**{ratio(g['overhead_once_vs_lazy'])}**", f"**{ratio(g['step_once_vs_lazy'])}**"]
    lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def peer_table(d, peer):
    peer = peer.get("zoo", peer)
    by_model = {m["model"]: m for m in peer["results"]}
    head = ["model", "tc eager ms", "tc lazy ms", "tc once ms", "torch eager ms", "torch jit ms",
            "torch lazy ms", "eager tc/torch", "once tc/jit", "lazy tc/torch"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    logs = {"e": [], "j": [], "l": []}
    for s in d["summary"]:
        p = by_model.get(s["target"])
        if p is None:
            continue
        pe, pj, pl = (p[k]["median_ms"] for k in ("eager", "jit", "lazy"))
        te, tl, to = (s[f"{k}_step_us"] / 1000 for k in ("eager", "lazy", "once"))
        for k, a, b in (("e", te, pe), ("j", to, pj), ("l", tl, pl)):
            logs[k].append(math.log(a / b))
        lines.append("| " + " | ".join([s["target"], f"{te:.2f}", f"{tl:.2f}", f"{to:.2f}",
                                        f"{pe:.2f}", f"{pj:.2f}", f"{pl:.2f}", f"{te / pe:.2f}",
                                        f"{to / pj:.2f}", f"{tl / pl:.2f}"]) + " |")
    geo = {k: math.exp(sum(v) / len(v)) for k, v in logs.items() if v}
    lines.append("| **geomean** |" + " |" * 6 + f" **{geo['e']:.2f}** | **{geo['j']:.2f}** | **{geo['l']:.2f}** |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_json")
    ap.add_argument("--peer", help="torch_peer.py --json output: compare step times")
    a = ap.parse_args()
    d = json.load(open(a.bench_json))
    if a.peer:
        print(peer_table(d, json.load(open(a.peer))))
    else:
        print(summary_table(d))


if __name__ == "__main__":
    main()
