#!/usr/bin/env python3
"""Every repository path that README.md and docs/*.md name exists (ctest `docs.paths`).

A path is a token that starts with one of the repository's top-level folders (`capture/`,
`replay/backends/cpu/cpu_kernels.h`, `tests/cli/*.sh`), or that names a project file by itself
(`CMakeLists.txt`, `DESIGN.md`), in prose, in backticks or as a Markdown link; a relative link
(`[onnx.md](onnx.md)`) is resolved against the document's folder. Globs must match at least one
file. Not checked: absolute paths (system files), `build*/` paths (made by a build), URLs, and
placeholders (a component in capitals such as `NAME` or `PROGRAM.trace`, or with `<...>`).
A folder that moved shows up here: `runtime/session.h` is no longer a path of this tree.

Usage: check_paths.py REPO_ROOT     exit 0 if every path exists, 1 listing each missing one
       check_paths.py --self-test   checks the extraction rules on made-up text
"""
import glob
import os
import re
import sys
import tempfile

# The repository's top-level folders, and those it used to have (a reference to one of them is
# a stale path, reported like any other).
TOP = ("capture", "store", "replay", "cli", "frontend", "python", "tests", "fixtures", "bench",
       "docs", "fuzz", "scripts", "cmake", "compile", "backends", "runtime")
# Project files named without a folder: they must exist at the root.
ROOT_FILES = ("CMakeLists.txt", "README.md", "DESIGN.md", "STYLE.md", "CONTRIBUTING.md",
              "LICENSE", "CHANGELOG.md")
# Made by the build from a template beside them (CMake's configure_file).
GENERATED = {"capture/core/version.h": "capture/core/version.h.in"}

PATH_CHARS = r"[A-Za-z0-9_.*<>+-]|\{[A-Za-z0-9_.,-]*\}"
TREE_PATH = re.compile(r"(?<![\w/.$~-])((?:%s)/(?:%s|/)*)" % ("|".join(TOP), PATH_CHARS))
ROOT_FILE = re.compile(r"(?<![\w/.$-])(%s)(?![\w/])" % "|".join(re.escape(f) for f in ROOT_FILES))
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def is_placeholder(path):
    for part in path.split("/"):
        stem = part.split(".")[0]
        if "<" in part or ">" in part:
            return True
        if len(stem) >= 2 and re.fullmatch(r"[A-Z][A-Z0-9_]*", stem) and part not in ROOT_FILES:
            return True
    return False


def clean(token):
    # Prose punctuation after a path ("see tests/cli/.", "(docs/sim.md),") is not part of it.
    return token.rstrip(".,;:")


def paths_in(text):
    """(path, relative_to_document) pairs named by `text`."""
    found = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target) or target.startswith("/"):
            continue
        found.append((target, True))
    for m in TREE_PATH.finditer(text):
        found.append((clean(m.group(1)), False))
    for m in ROOT_FILE.finditer(text):
        found.append((m.group(1), False))
    return [(p, rel) for p, rel in found if p and not is_placeholder(p)]


def expand_braces(path):
    """`train_{mlp,convnet}.trace` -> both names (the shell's brace expansion, one level)."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [x for alt in m.group(1).split(",") for x in expand_braces(path[:m.start()] + alt + path[m.end():])]


def exists_one(root, path):
    if path in GENERATED:
        return os.path.exists(os.path.join(root, GENERATED[path]))
    full = os.path.join(root, path)
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    if os.path.exists(full):
        return True
    # A unit named without its extension (`frontend/program/program_runner`), a program by the
    # source it is built from (`bench/erf_ulps`), a class by its header (`replay/engine/Session`)
    # or a command by its file (`cli/run`): a file of its folder starts with that name.
    folder, name = os.path.split(full)
    if path.endswith("/") or "." in name or not os.path.isdir(folder):
        return False
    return any(f.lower().startswith(name.lower()) for f in os.listdir(folder))


def exists(root, path):
    return all(exists_one(root, p) for p in expand_braces(path))


def check(root):
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    missing = []
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, 1):
            for path, relative in paths_in(line):
                base = os.path.dirname(os.path.relpath(doc, root)) if relative else ""
                target = os.path.normpath(os.path.join(base, path)) if base else path
                if not exists(root, target):
                    missing.append(f"{os.path.relpath(doc, root)}:{number}: '{path}' does not exist"
                                   + (f" (resolved to {target})" if target != path else ""))
    return missing


def self_test():
    text = ("see `replay/backends/cpu/cpu_kernels.h` and tests/cli/*.sh, (docs/sim.md), "
            "[onnx](onnx.md) and [site](https://example.com/x.md), DESIGN.md; "
            "`frontend/NAME/`, fuzz/crashes/<harness>/, build/cli/tracecache, "
            "/usr/include/x.h, `runtime/session.h`, `replay/compile/`, fixtures/programs/train_{mlp,convnet}.trace.")
    got = paths_in(text)
    want = [("onnx.md", True), ("replay/backends/cpu/cpu_kernels.h", False), ("tests/cli/*.sh", False),
            ("docs/sim.md", False), ("runtime/session.h", False), ("replay/compile/", False),
            ("fixtures/programs/train_{mlp,convnet}.trace", False), ("DESIGN.md", False)]
    assert got == want, got
    assert is_placeholder("replay/backends/NAME/") and is_placeholder("PROGRAM.trace")
    assert not is_placeholder("CMakeLists.txt") and not is_placeholder("tests/cli/lib.sh")
    assert expand_braces("a/{b,c}.d") == ["a/b.d", "a/c.d"]
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "replay", "engine"))
        for name in ("README.md", "docs/onnx.md", "replay/engine/session.h"):
            open(os.path.join(root, name), "w").close()
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("[x](onnx.md) `replay/engine/session.h` replay/engine/Session `replay/engine/`\n"
                    "[y](../README.md) `runtime/session.h` replay/engine/gone.h `replay/compile/`\n")
        got = [m.split(": ", 1)[1] for m in check(root)]
        assert got == ["'runtime/session.h' does not exist", "'replay/engine/gone.h' does not exist",
                       "'replay/compile/' does not exist"], got
    print("self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    missing = check(argv[1])
    for m in missing:
        print(m)
    if missing:
        print(f"{len(missing)} path(s) named in the docs do not exist: fix the path, or the "
              "document if the file is gone", file=sys.stderr)
        return 1
    print("every path named in README.md and docs/*.md exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
