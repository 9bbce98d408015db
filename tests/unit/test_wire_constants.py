"""The Python client and the bench take the tokenpipe.v1 subprotocol name from
tokenpipe.protocol.ws, never from a copy of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import tokenpipe
from tokenpipe.protocol.ws import PROTOCOL

SRC = Path(tokenpipe.__file__).parent


def test_client_and_bench_hold_no_copy_of_the_subprotocol_name() -> None:
    modules = [*(SRC / "client").glob("*.py"), *(SRC / "bench").glob("*.py")]
    assert len(modules) > 5
    for module in modules:
        tree = ast.parse(module.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                    | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)}
        copies = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and PROTOCOL in n.value
                  and id(n) not in docstrings]
        assert copies == [], f"{module.name}: lines {copies}"
