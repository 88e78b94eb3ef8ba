#!/usr/bin/env python3
"""The include rules of tracecache's layers (docs/architecture.md, "Layers").

The build already fences each layer's headers (cmake/layers.cmake): a file cannot include a
header of a layer it does not link. This check adds what the build cannot see: the order of
folders inside a layer (capture/ops below capture/ir, ...), and that no file reaches around the
fence with a relative path ("../") or an include of a source file.

Usage: check_includes.py REPO_ROOT   (exit 0: every include allowed; 1: violations listed)
       check_includes.py --self-test  (the checker itself finds a planted violation)
"""
import os
import re
import sys

CAPTURE = ["capture/core", "capture/ops", "capture/ir", "capture/trace", "capture/reference"]
FRONTEND = ["frontend/files", "frontend/program", "frontend/zoo"]
STORE = ["store/core", "store/codec", "store/memory", "store/sqlite", "store/tiers"]
BELOW_RUNTIME = CAPTURE + FRONTEND + STORE + ["compile", "backends"]

# folder -> folders (besides itself) whose headers it may include. A folder covers its subfolders
# (backends covers backends/cpu and backends/sim).
ALLOWED = {
    "capture/core": [],
    "capture/ops": CAPTURE[:1],
    "capture/ir": CAPTURE[:2],
    "capture/trace": CAPTURE[:3],
    "capture/reference": CAPTURE[:4],
    "frontend/files": CAPTURE,
    "frontend/program": CAPTURE + FRONTEND[:1],
    "frontend/zoo": CAPTURE + FRONTEND[:2],
    "store/core": CAPTURE,
    "store/codec": CAPTURE,
    "store/memory": CAPTURE,
    "store/sqlite": CAPTURE + ["store/core", "store/codec", "store/memory"],
    "store/tiers": CAPTURE + ["store/core", "store/codec", "store/memory", "store/sqlite"],
    "compile": CAPTURE + STORE,
    "backends": CAPTURE + ["compile"],
    "runtime": BELOW_RUNTIME,
    "cli": BELOW_RUNTIME + ["runtime"],
    "python": BELOW_RUNTIME + ["runtime"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def owner(path):
    """The most specific folder in ALLOWED that contains path, or None."""
    best = None
    for folder in ALLOWED:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def violations_in(path, text):
    out = []
    me = owner(path)
    if me is None:
        return out
    for lineno, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        inc = m.group(1)
        if ".." in inc.split("/") or inc.endswith(".cc"):
            out.append(f"{path}:{lineno}: '{inc}' reaches around the layer fence")
            continue
        target = owner(inc)
        if target is None:
            out.append(f"{path}:{lineno}: '{inc}' is not a header of any layer")
        elif target != me and target not in ALLOWED[me] and not target.startswith(me + "/"):
            out.append(f"{path}:{lineno}: {me} may not include '{inc}' ({target} is not below it)")
    return out


def main(argv):
    if argv[1:] == ["--self-test"]:
        planted = violations_in("capture/ir/graph.cc", '#include "runtime/runtime.h"\n')
        upward = violations_in("capture/ops/ops.cc", '#include "capture/trace/tensor.h"\n')
        fine = violations_in("runtime/runtime.cc", '#include "capture/ir/graph.h"\n')
        ok = len(planted) == 1 and len(upward) == 1 and not fine
        print("self-test", "passed" if ok else f"FAILED: {planted} {upward} {fine}")
        return 0 if ok else 1
    root = argv[1]
    problems = []
    checked = 0
    for folder in sorted({f.split("/")[0] for f in ALLOWED}):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".h.in")):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8") as f:
                    problems += violations_in(rel, f.read())
                checked += 1
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} include(s) against the layer order")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
