"""The docs tell the truth about the code: every link leads somewhere, every module
docs/architecture.md names exists and every module exists in it, and every route the
README and docs/doors.md name is served with the method they name, every `--flag` they
name is an option of a `tokenpipe` command (or of the script beside it)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Match, Mount

from tokenpipe.cli import parser
from tokenpipe.config import Settings
from tokenpipe.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tokenpipe"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
ROUTE = re.compile(r"`(?:(GET|POST|DELETE|HEAD)(?:\s*/\s*(?:GET|POST|DELETE|HEAD))*\s+)?"
                   r"(/(?:v1|api|ws|health|metrics)[^`\s]*)`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text().splitlines()
            if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(target)
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(target)
    assert not broken, f"{page.name} links to what is not there: {broken}"


def _modules() -> set[str]:
    return {str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
            if "static" not in p.parts and p.name != "__init__.py"}


def test_the_architecture_names_every_module_and_only_real_ones() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = {code for code in CODE.findall(text) if code.endswith(".py")}
    modules = _modules()
    invented = sorted(n for n in named if "/" in n and n not in modules
                      and not (SRC / n).exists() and not (ROOT / n).exists())
    assert not invented, f"docs/architecture.md names modules that do not exist: {invented}"
    missing = sorted(m for m in modules if m not in named)
    assert not missing, f"docs/architecture.md does not name these modules: {missing}"


def _serves(app: Starlette, method: str, path: str) -> bool:
    """Some route other than the page's catch-all mount answers `method path` in full."""
    kind = "websocket" if path == "/ws" else "http"
    scope = {"type": kind, "path": path, "method": method or "GET", "root_path": ""}
    for route in app.router.routes:
        if isinstance(route, Mount) and route.path == "":
            continue  # the UI at / takes every path
        if route.matches(scope)[0] is Match.FULL:
            return True
    return False


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "doors.md"],
                         ids=lambda p: p.name)
def test_every_route_the_docs_name_is_served(page: Path) -> None:
    app = create_app(Settings())
    unserved = []
    for method, path in ROUTE.findall(page.read_text()):
        path = path.split("?")[0].rstrip(".,")
        path = re.sub(r"\{[^}]+\}|\b[A-Z]{2,}\b", "x", path)  # {id}, TOKEN: any value
        if not _serves(app, method, path):
            unserved.append(f"{method} {path}".strip())
    assert not unserved, f"{page.name} names routes the server does not serve: {unserved}"


FLAG = re.compile(r"`(?:[^`\s]*\s+)?(--[a-z][a-z0-9-]*)")


def _flags() -> set[str]:
    """Every option string of every `tokenpipe` command."""
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for command in commands.choices.values() for action in command._actions
            for flag in action.option_strings}


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "doors.md"],
                         ids=lambda p: p.name)
def test_every_flag_the_docs_name_exists(page: Path) -> None:
    flags = _flags()
    scripts = " ".join(p.read_text() for p in (ROOT / "scripts").glob("*.sh"))
    invented = sorted({flag for flag in FLAG.findall(page.read_text())
                       if flag not in flags and flag not in scripts})
    assert not invented, f"{page.name} names flags nothing takes: {invented}"
