#!/usr/bin/env python3
"""The remote cache tier's cost (issue 15): a remote hit against a local SQLite hit and against a
compile, and a new process's cold start in once mode with a warm remote against a cold one.

Starts a private redis-server on a unix socket in a temporary directory (stopped at exit), then,
REPEATS times each, with the tracecache command given by --tc (default build/cli/tracecache):

  lookup  per target (a fixture program, a zoo model at the small preset), one step each:
          compile  = the `compile` timer of a run on a new database with the remote empty
          remote   = the `lookup` timer of a run on a new database, served by the remote (it
                     includes copying the executable into that database)
          disk     = the `lookup` timer of the next run on that database (a local SQLite hit)
  cold    zoo run resnet50 --mode once --steps 1 as a new process on a new database: the
          process's wall time with the remote cold (the run fills it) and warm, with the
          traces and compiles each made.

Prints a Markdown table of medians (ms); --json prints the rows instead. The remote here is on
the same machine (a unix socket): a remote over a network adds its round trips to every remote
lookup.

    bench/remote_tier.py                 # the table
    bench/remote_tier.py --repeats 9 --json
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(tc, args):
    r = subprocess.run([tc, *args, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tracecache {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout)


def timer(j, name):
    t = j["timers_ms"].get(name)
    return t["total"] if t else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tc", default="build/cli/tracecache")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tc-remote-bench-")
    sock = os.path.join(tmp, "redis.sock")
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                               "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        remote = ["--remote", "unix://" + sock]
        flush = lambda: subprocess.run(["redis-cli", "-s", sock, "FLUSHALL"], check=True, capture_output=True)
        targets = [("mlp.trace", ["run", "fixtures/programs/mlp.trace", "--steps", "1"]),
                   ("resnet18 (small)", ["zoo", "run", "resnet18", "--preset", "small", "--steps", "1"])]
        rows = []
        for label, cmd in targets:
            compile_ms, remote_ms, disk_ms = [], [], []
            for i in range(a.repeats):
                flush()
                first = run(a.tc, cmd + ["--db", os.path.join(tmp, f"{label}-{i}-a.db")] + remote)
                compile_ms.append(timer(first, "compile"))
                db = os.path.join(tmp, f"{label}-{i}-b.db")
                second = run(a.tc, cmd + ["--db", db] + remote)
                assert second["counters"]["compiles"] == 0, second["counters"]
                remote_ms.append(timer(second, "lookup"))
                third = run(a.tc, cmd + ["--db", db])
                assert third["counters"]["cache_hits_disk"] >= 1, third["counters"]
                disk_ms.append(timer(third, "lookup"))
            rows.append({"target": label, "compile_ms": statistics.median(compile_ms),
                         "remote_hit_ms": statistics.median(remote_ms), "disk_hit_ms": statistics.median(disk_ms)})
        cold, warm, counts = [], [], {}
        cmd = ["zoo", "run", "resnet50", "--mode", "once", "--steps", "1"]
        for i in range(a.repeats):
            flush()
            for kind, out in (("cold", cold), ("warm", warm)):
                start = time.perf_counter()
                j = run(a.tc, cmd + ["--db", os.path.join(tmp, f"r50-{i}-{kind}.db")] + remote)
                out.append((time.perf_counter() - start) * 1000)
                counts[kind] = (j["counters"]["traces"], j["counters"]["compiles"])
        start_row = {"cold_ms": statistics.median(cold), "warm_ms": statistics.median(warm),
                     "cold_traces_compiles": counts["cold"], "warm_traces_compiles": counts["warm"]}
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps({"lookups": rows, "resnet50_once_start": start_row}, indent=1))
        return
    print("| target | compile (ms) | remote hit (ms) | local SQLite hit (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['target']} | {r['compile_ms']:.2f} | {r['remote_hit_ms']:.2f} | {r['disk_hit_ms']:.2f} |")
    print()
    print("| resnet50, once mode, new process | wall (ms) | traces, compiles |")
    print("| --- | ---: | --- |")
    print(f"| remote cold | {start_row['cold_ms']:.0f} | {start_row['cold_traces_compiles']} |")
    print(f"| remote warm | {start_row['warm_ms']:.0f} | {start_row['warm_traces_compiles']} |")


if __name__ == "__main__":
    main()
