"""The op-mapping table of docs/python.md, generated from `lowering.LOWERINGS` so it cannot
drift: `python3 -m tracecache.torch ops --markdown` prints it, and tests/python/test_torch_export.py
checks that docs/python.md holds exactly this text between its markers."""

from .lowering import table

__all__ = ["BEGIN", "END", "markdown_table"]

BEGIN = "<!-- BEGIN op-mapping (python3 -m tracecache.torch ops --markdown) -->"
END = "<!-- END op-mapping -->"


def markdown_table():
    rows = ["| ATen op | tracecache ops | note |", "| --- | --- | --- |"]
    for name, ops, note in table():
        rows.append(f"| `{name}` | {ops} | {note} |")
    return "\n".join(rows) + "\n"
