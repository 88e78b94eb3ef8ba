#!/usr/bin/env python3
"""The include rules of tracecache's layers (docs/architecture.md, "Layers").

The build already fences each layer's headers (cmake/layers.cmake): a file cannot include a
header of a layer it does not link. This check adds what the build cannot see: the order of
folders inside a layer (capture/ops below capture/ir, replay/backends/ below replay/backends/cpu, ...), that
every folder under a layer root has rules here (a new one fails until it is added), and that no
file reaches around the fence with a relative path ("../") or an include of a source file.
Includes are checked whatever their delimiter: "capture/..." and <capture/...> alike.

Usage: check_includes.py REPO_ROOT   (exit 0: every include allowed; 1: violations listed)
       check_includes.py --docs ARCHITECTURE_MD  (its layer table lists exactly the table's folders)
       check_includes.py --self-test  (the checker against planted cases, SELF_TEST below)
"""
import os
import re
import sys

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmake", "layers.txt")


def read_table(path=TABLE):
    """cmake/layers.txt as (folders in order, folder -> library, folder -> folders it may
    include besides itself); a library name in the third column stands for all its folders."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) < 2:
                raise SystemExit(f"{path}: a row needs a folder and a library: {line.strip()!r}")
            rows.append((fields[0], fields[1], fields[2:]))
    library_of = {folder: library for folder, library, _ in rows}
    folders_of = {}
    for folder, library, _ in rows:
        folders_of.setdefault(library, []).append(folder)
    allowed = {}
    for folder, _, below in rows:
        expanded = []
        for item in below:
            if item in folders_of:
                expanded += folders_of[item]
            elif item in library_of:
                expanded.append(item)
            else:
                raise SystemExit(f"{path}: {folder} may include {item!r}, which is neither a folder nor a library")
        allowed[folder] = expanded
    return [r[0] for r in rows], library_of, allowed


FOLDERS, LIBRARY_OF, ALLOWED = read_table()
LAYER_ROOTS = sorted({f.split("/")[0] for f in FOLDERS})
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
        return [f"{path}: folder '{os.path.dirname(path)}' has no include rules: add a row for it to "
                f"cmake/layers.txt"]
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
    ("capture/ir/graph.cc", '#include "replay/engine/runtime.h"\n', 1),
    ("capture/ops/ops.cc", '#include "capture/trace/tensor.h"\n', 1),
    ("capture/ops/ops.cc", "#include <capture/trace/tensor.h>\n", 1),
    ("capture/ops/ops.cc", "#include <fmt/format.h>\n#include <vector>\n", 0),
    ("capture/ops/ops.cc", '#include "../trace/tensor.h"\n', 1),
    ("frontend/tflite/importer.cc", "", 1),
    ("frontend/onnx/importer.cc", '#include "frontend/zoo/model.h"\n', 1),
    ("frontend/onnx/importer.cc", '#include "frontend/program/program.h"\n', 0),
    ("store/cloud/s3_tier.h", '#include "capture/core/status.h"\n', 1),
    ("store/remote/redis_client.h", '#include "store/tiers/tiered_store.h"\n', 1),
    ("replay/backends/backend.h", '#include "replay/backends/cpu/cpu_backend.h"\n', 1),
    ("replay/backends/sim/sim_backend.h", '#include "replay/backends/cpu/cpu_backend.h"\n', 0),
    ("replay/backends/cpu/cpu_backend.h", '#include "replay/backends/sim/sim_backend.h"\n', 1),
    ("replay/compile/compiler.cc", '#include "store/sqlite/cache_db.h"\n', 1),
    ("replay/compile/executable.cc", '#include "store/codec/proto/tracecache.pb.h"\n', 0),
    ("replay/guards/shape_specialization.h", '#include "replay/engine/runtime.h"\n', 1),
    ("replay/engine/runtime.cc", '#include "capture/ir/graph.h"\n#include "replay/guards/guard_set.h"\n', 0),
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


def docs_problems(text):
    """What docs/architecture.md's layer table (its "## Layers" section, the folders in backticks
    in the second column) gets wrong against cmake/layers.txt."""
    section = text.split("## Layers", 1)[-1].split("\n## ", 1)[0]
    listed = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 3:
            listed += [f.rstrip("/") for f in re.findall(r"`([\w/.-]+/)`", cells[2])]
    problems = [f"docs/architecture.md's layer table does not list {f}/ (cmake/layers.txt declares it)"
                for f in FOLDERS if f not in listed]
    problems += [f"docs/architecture.md's layer table lists {f}/, which cmake/layers.txt does not declare"
                 for f in listed if f.split("/")[0] in LAYER_ROOTS and f not in LIBRARY_OF]
    return problems


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) == 3 and argv[1] == "--docs":
        with open(argv[2], encoding="utf-8") as f:
            problems = docs_problems(f.read())
        for p in problems:
            print(p)
        print(f"{len(FOLDERS)} folders in cmake/layers.txt, {len(problems)} difference(s) in {argv[2]}")
        return 1 if problems else 0
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
