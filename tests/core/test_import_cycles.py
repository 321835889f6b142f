"""No import cycle inside proxy/core, counting imports under TYPE_CHECKING too (issue 26): a cycle
of type-only imports still ties two modules together, so neither can be read or changed alone."""

from __future__ import annotations

import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "proxy" / "core"
_FROM = re.compile(r"^\s*from\s+(\.|proxy\.core\.?)(\w*)\s+import\s+(.+)$")


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    """module -> the core modules it imports (``from .x import``, ``from . import x``,
    ``from proxy.core.x import``), at any indentation (TYPE_CHECKING blocks, functions)."""
    mods = {p.stem for p in root.glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for p in root.glob("*.py"):
        text = p.read_text()
        text = re.sub(r"\(\s*([^)]*?)\s*\)", lambda m: m.group(1).replace("\n", " "), text)  # join ( ... )
        for line in text.splitlines():
            m = _FROM.match(line)
            if not m:
                continue
            if m.group(2):
                targets = {m.group(2)}
            else:  # from . import a, b
                targets = {n.strip().split(" as ")[0] for n in m.group(3).split(",")}
            graph[p.stem] |= {t for t in targets if t in mods and t != p.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_core() -> None:
    assert cycles(import_graph()) == []


def test_the_checker_sees_type_checking_cycles(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import X\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import (\n        Y,\n    )\n"
    )
    (tmp_path / "c.py").write_text("from . import a\n")
    g = import_graph(tmp_path)
    assert g == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(g) == [["a", "b"]]
