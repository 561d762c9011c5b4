"""The decision core stays pure: no module under queue/core imports an I/O stack."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {
    "asyncio",
    "sqlalchemy",
    "kubernetes_asyncio",
    "fastapi",
    "pydantic",
    "aiohttp",
    "httpx",
}
CORE = Path(__file__).resolve().parents[2] / "queue" / "core"


def _imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_modules_import_no_io_stack() -> None:
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) > 10
    offenders = {
        path.name: sorted(_imported_roots(path.read_text()) & FORBIDDEN) for path in modules
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_scan_sees_every_import_form() -> None:
    source = "import asyncio.tasks\nfrom pydantic import BaseModel\nfrom . import model\n"
    assert _imported_roots(source) == {"asyncio", "pydantic"}
