"""No upward arrows between the rooms that the last review found crossed (issue 36 item 5).

`proxy/runtime/` (the live policy) sits beside `proxy/http/` (the forwarder) and meets it only
through the neutral `proxy/contracts.py` and `proxy/sse.py`; `proxy/harness/` (servers and the client
workload for tests, the demo and benchmarks) sits below `proxy/demo/`. Every import counts, at any
indentation (function-level and TYPE_CHECKING imports too), read with `ast` so strings and comments
do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parents[2] / "proxy"


def imported_modules(path: Path) -> set[str]:
    """Every absolute module a file imports (`import a.b`, `from a.b import c` -> a.b and a.b.c)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def arrows(room: str, forbidden: str) -> list[str]:
    return sorted(
        f"{p.relative_to(PROXY.parent)} -> {m}"
        for p in (PROXY / room).rglob("*.py")
        for m in imported_modules(p)
        if m == forbidden or m.startswith(forbidden + ".")
    )


@pytest.mark.parametrize(("room", "forbidden"), [("runtime", "proxy.http"), ("harness", "proxy.demo")])
def test_no_upward_arrow(room: str, forbidden: str) -> None:
    assert arrows(room, forbidden) == []


def test_the_check_sees_a_function_level_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text('"""from proxy.http import no"""\n\ndef f():\n    from proxy.http.sse import SSEParser\n')
    assert imported_modules(f) == {"proxy.http.sse", "proxy.http.sse.SSEParser"}  # not the docstring
