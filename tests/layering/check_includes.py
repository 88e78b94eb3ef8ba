#!/usr/bin/env python3
"""The include rules of tracecache's layers (docs/architecture.md, "Layers").

The build already fences each layer's headers (cmake/layers.cmake): a file cannot include a
header of a layer it does not link. This check adds what the build cannot see: the order of
folders inside a layer (capture/ops below capture/ir, backends/ below backends/cpu, ...), that
every folder under a layer root has rules here (a new one fails until it is added), and that no
file reaches around the fence with a relative path ("../") or an include of a source file.
Includes are checked whatever their delimiter: "capture/..." and <capture/...> alike.

Usage: check_includes.py REPO_ROOT   (exit 0: every include allowed; 1: violations listed)
       check_includes.py --self-test  (the checker against planted cases, SELF_TEST below)
"""
import os
import re
import sys

LAYER_ROOTS = ["capture", "frontend", "store", "compile", "backends", "runtime", "cli", "python"]
CAPTURE = ["capture/core", "capture/ops", "capture/ir", "capture/trace", "capture/reference"]
FRONTEND = ["frontend/files", "frontend/program", "frontend/zoo", "frontend/onnx"]
STORE = ["store/core", "store/codec", "store/memory", "store/sqlite", "store/remote", "store/tiers"]
BACKENDS = ["backends", "backends/cpu", "backends/sim", "backends/registry"]
BELOW_RUNTIME = CAPTURE + FRONTEND + STORE + ["compile"] + BACKENDS

# folder -> folders (besides itself) whose headers it may include. Every folder under a layer
# root that holds a .h or .cc is a key here (and is in its layer's FOLDERS in CMakeLists.txt);
# a subfolder is a folder of its own (backends/cpu is not part of backends, the interface).
ALLOWED = {
    "capture/core": [],
    "capture/ops": CAPTURE[:1],
    "capture/ir": CAPTURE[:2],
    "capture/trace": CAPTURE[:3],
    "capture/reference": CAPTURE[:4],
    "frontend/files": CAPTURE,
    "frontend/program": CAPTURE + FRONTEND[:1],
    "frontend/zoo": CAPTURE + FRONTEND[:2],
    "frontend/onnx": CAPTURE + FRONTEND[:2],
    "store/core": CAPTURE,
    "store/codec": CAPTURE,
    "store/memory": CAPTURE,
    "store/sqlite": CAPTURE + ["store/core", "store/codec", "store/memory"],
    "store/remote": CAPTURE + ["store/core", "store/codec", "store/sqlite"],
    "store/tiers": CAPTURE + ["store/core", "store/codec", "store/memory", "store/sqlite", "store/remote"],
    "compile": CAPTURE + ["store/codec"],
    "backends": CAPTURE + ["compile"],
    "backends/cpu": CAPTURE + ["compile"] + BACKENDS[:1],
    "backends/sim": CAPTURE + ["compile"] + BACKENDS[:2],
    "backends/registry": CAPTURE + ["compile"] + BACKENDS[:3],
    "runtime/guards": BELOW_RUNTIME,
    "runtime": BELOW_RUNTIME + ["runtime/guards"],
    "cli": BELOW_RUNTIME + ["runtime/guards", "runtime"],
    "python": BELOW_RUNTIME + ["runtime/guards", "runtime", "cli"],
}
# A project include, "..." or <...> (an <...> one is the project's when its first path
# component is a layer root; the others are system and library headers).
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_SUFFIXES = (".h", ".cc", ".h.in")


def owner(path):
    """The folder in ALLOWED that holds the file `path` itself, or None."""
    folder = os.path.dirname(path)
    return folder if folder in ALLOWED else None


def owner_of_include(inc):
    """The most specific folder in ALLOWED that contains the included path (a generated header
    sits below its folder: store/codec/proto/tracecache.pb.h), or None."""
    best = None
    for folder in ALLOWED:
        if inc.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def violations_in(path, text):
    me = owner(path)
    if me is None:
        return [f"{path}: folder '{os.path.dirname(path)}' has no include rules: add it to ALLOWED in "
                f"tests/layering/check_includes.py and to its layer's FOLDERS in CMakeLists.txt"]
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        delimiter, inc = m.groups()
        if delimiter == "<" and inc.split("/")[0] not in LAYER_ROOTS:
            continue
        if ".." in inc.split("/") or inc.endswith(".cc"):
            out.append(f"{path}:{lineno}: '{inc}' reaches around the layer fence")
            continue
        target = owner_of_include(inc)
        if target is None:
            out.append(f"{path}:{lineno}: '{inc}' is not a header of any layer")
        elif target != me and target not in ALLOWED[me]:
            out.append(f"{path}:{lineno}: {me} may not include '{inc}' ({target} is not below it)")
    return out


# (path, text, number of violations the checker must report)
SELF_TEST = [
    ("capture/ir/graph.cc", '#include "runtime/runtime.h"\n', 1),
    ("capture/ops/ops.cc", '#include "capture/trace/tensor.h"\n', 1),
    ("capture/ops/ops.cc", "#include <capture/trace/tensor.h>\n", 1),
    ("capture/ops/ops.cc", "#include <fmt/format.h>\n#include <vector>\n", 0),
    ("capture/ops/ops.cc", '#include "../trace/tensor.h"\n', 1),
    ("frontend/tflite/importer.cc", "", 1),
    ("frontend/onnx/importer.cc", '#include "frontend/zoo/model.h"\n', 1),
    ("frontend/onnx/importer.cc", '#include "frontend/program/program.h"\n', 0),
    ("store/cloud/s3_tier.h", '#include "capture/core/status.h"\n', 1),
    ("store/remote/redis_client.h", '#include "store/tiers/tiered_store.h"\n', 1),
    ("backends/backend.h", '#include "backends/cpu/cpu_backend.h"\n', 1),
    ("backends/sim/sim_backend.h", '#include "backends/cpu/cpu_backend.h"\n', 0),
    ("backends/cpu/cpu_backend.h", '#include "backends/sim/sim_backend.h"\n', 1),
    ("compile/compiler.cc", '#include "store/sqlite/cache_db.h"\n', 1),
    ("compile/executable.cc", '#include "store/codec/proto/tracecache.pb.h"\n', 0),
    ("runtime/guards/shape_specialization.h", '#include "runtime/runtime.h"\n', 1),
    ("runtime/runtime.cc", '#include "capture/ir/graph.h"\n#include "runtime/guards/guard_set.h"\n', 0),
]


def self_test():
    failed = []
    for path, text, expected in SELF_TEST:
        found = violations_in(path, text)
        if len(found) != expected:
            failed.append(f"{path} with {text!r}: expected {expected} violation(s), got {found}")
    for f in failed:
        print("self-test FAILED:", f)
    print(f"self-test: {len(SELF_TEST) - len(failed)} of {len(SELF_TEST)} cases as expected")
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1]
    problems = []
    checked = 0
    for layer_root in LAYER_ROOTS:
        for dirpath, _, files in os.walk(os.path.join(root, layer_root)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
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
