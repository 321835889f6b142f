"""proxy/core must stay a pure library: no web, async, HTTP-client or metrics imports, no globals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "proxy" / "core"
FORBIDDEN = {
    "fastapi",
    "starlette",
    "httpx",
    "asyncio",
    "uvicorn",
    "prometheus_client",
    "requests",
    "aiohttp",
    "anyio",
    "trio",
}


def _modules():
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 8, f"expected the core modules under {CORE}"
    return files


def _imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("<dynamic __import__>")
    return roots


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_core_module_imports_nothing_forbidden(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = _imported_roots(tree) & (FORBIDDEN | {"<dynamic __import__>"})
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_core_module_has_no_global_statement_and_is_small(path: Path):
    src = path.read_text()
    tree = ast.parse(src)
    assert not any(isinstance(n, ast.Global) for n in ast.walk(tree)), f"{path.name} uses `global`"
    assert len(src.splitlines()) <= 400, f"{path.name} is {len(src.splitlines())} lines"
    assert ast.get_docstring(tree), f"{path.name} has no module docstring"


def test_checker_catches_a_forbidden_import():
    tree = ast.parse("import os\nfrom starlette.requests import Request\nimport asyncio.tasks\n")
    assert _imported_roots(tree) & FORBIDDEN == {"starlette", "asyncio"}


def test_importing_core_does_not_load_forbidden_modules():
    import subprocess
    import sys

    code = (
        "import sys, proxy.core, proxy.core.policy; "
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r}); print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(CORE.parents[1])
    )
    assert out.stdout.strip() == "[]", out.stdout
