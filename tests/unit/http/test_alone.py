"""tokenpipe.http stands alone: it imports nothing of tokenpipe (ARCHITECTURE.md), so the
bench, the openai engine and anyone else can use it without the server."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tokenpipe.http

PACKAGE = Path(tokenpipe.http.__file__).parent


def test_no_module_of_the_package_imports_the_rest_of_tokenpipe() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {m.name for m in modules} >= {"client.py", "connection.py", "sse.py"}
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, f"{module.name} imports from outside tokenpipe.http"
                names = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] == "tokenpipe"], module.name


def test_importing_it_loads_nothing_else_of_tokenpipe() -> None:
    code = ("import sys, tokenpipe.http; print(' '.join(sorted(m for m in sys.modules "
            "if m.startswith('tokenpipe'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert "tokenpipe.http.client" in out
    assert [m for m in out if m != "tokenpipe" and not m.startswith("tokenpipe.http")] == []


def test_the_public_names_are_complete() -> None:
    public = {n for n in dir(tokenpipe.http) if not n.startswith("_")}
    modules = {"client", "connection", "errors", "sse"}
    assert set(tokenpipe.http.__all__) == public - modules
