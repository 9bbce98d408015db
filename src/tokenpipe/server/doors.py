"""The doors: every API the server speaks, one `Door` each, in one table (DOORS).

What the server does per door it reads from this table, and nowhere else:
- app assembly (app.py `mount`): each door's routes, the door of the longest prefix first
  (so /v1/messages is matched before /v1's catch-all), then one catch-all per door that
  answers 404 and 405 (with `Allow`, read from the door's own routes) in the door's words;
- the API key (security.RequireKey): deny by default, every path needs it unless it is in
  PUBLIC or one of the page's files; the 401 is the door's;
- the error shape of a path (http_limits, the app's handler of Starlette's errors): the
  door that owns the path, FastAPI's `{"detail"}` where none does;
- the metrics' `api` labels (`api_labels`) and the bench's API names (`bench_names`).

A new door is one more record here (or in the `doors` a test hands to create_app); the
heavy parts (routes) are import strings, so the CLI can read the table without loading
FastAPI's routers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol.anthropic.errors import error_json as anthropic_error
from ..protocol.ollama.errors import error_json as ollama_error
from ..protocol.openai.errors import error_json as openai_error

ErrorShape = Callable[[int, str], dict[str, Any]]  # (status, message) -> the JSON body
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
# served without the key: health and metrics (probes, Prometheus), the API's own docs
PUBLIC = frozenset({"/health", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc",
                    "/openapi.json"})
OTHER = "other"  # the metrics' label of a session no door started (tests, embedding)


def _openai(status: int, message: str) -> dict[str, Any]:
    return openai_error(message, status=status)


def _openai_not_found(method: str, path: str) -> str:
    return f"Invalid URL ({method} {path})"


def _wrong_method(method: str, path: str, allowed: str) -> str:
    return f"Method {method} not allowed on {path}; use {allowed}"


@dataclass(frozen=True)
class Door:
    """One API door. `routes`: "module:attr", an APIRouter or a function returning routes
    (or the object itself); `fast`: routes put before every other route of the app;
    `error`: the door's error body for a status and message (401, 404, 405, 413, ...);
    `no_key`: its 401 body when that says more (a code); `key_headers`: where it reads the
    key (`authorization`: `Bearer KEY`; any other header: the key itself); `own_key`: the
    door checks the key itself (the WebSocket handshake); `apis`: the metrics' labels of
    the sessions it starts; `bench`: the bench's names for it."""

    name: str
    prefix: str  # the door owns this path and every path below it
    routes: str | Callable[[], Any]
    error: ErrorShape
    apis: tuple[str, ...]
    no_key: dict[str, Any] | None = None
    key_headers: tuple[str, ...] = ("authorization", "x-api-key")
    own_key: bool = False
    catch_all: bool = True
    not_found: Callable[[str, str], str] = _openai_not_found  # (method, path) -> message
    wrong_method: Callable[[str, str, str], str] = _wrong_method  # (method, path, allowed)
    bench: tuple[str, ...] = ()
    fast: str | Callable[[], Any] | None = None

    def owns(self, path: str) -> bool:
        return path == self.prefix or path.startswith(self.prefix + "/")

    def refusal(self, status: int, message: str) -> dict[str, Any]:
        """The door's body for a refusal made before any route (the key's 401, a limit)."""
        if status == 401 and self.no_key is not None:
            return self.no_key
        return self.error(status, message)


def resolve(target: str | Callable[[], Any]) -> Any:
    """An import string "module:attr" as its object; a callable is called (a route
    factory), a router passed on."""
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
    return target() if callable(target) and not hasattr(target, "routes") else target


def door_at(path: str, doors: Iterable[Door]) -> Door | None:
    """The door owning `path` (the longest prefix), None where none does."""
    found = None
    for door in doors:
        if door.owns(path) and (found is None or len(door.prefix) > len(found.prefix)):
            found = door
    return found


def error_body(status: int, message: str, path: str, doors: Iterable[Door]) -> dict[str, Any]:
    """An error on `path` in its door's shape, FastAPI's `{"detail"}` where no door owns it."""
    door = door_at(path, doors)
    return door.refusal(status, message) if door is not None else {"detail": message}


def api_labels(doors: Iterable[Door]) -> frozenset[str]:
    """Every `api` label the metrics may carry: the doors' and OTHER."""
    return frozenset({OTHER, *(api for door in doors for api in door.apis)})


def bench_names(doors: Iterable[Door]) -> tuple[str, ...]:
    return tuple(name for door in doors for name in door.bench)


def mount_order(doors: Sequence[Door]) -> list[Door]:
    """The longest prefix first: a door inside another's prefix is matched before the
    outer door's catch-all."""
    return sorted(doors, key=lambda d: -len(d.prefix))


_NO_KEY = "Incorrect or missing API key: send Authorization: Bearer KEY"
_OPENAI_NO_KEY = openai_error(_NO_KEY, status=401, code="invalid_api_key")

WS = Door("ws", "/ws", "tokenpipe.server.ws.endpoint:routes", _openai, ("ws", "plain"),
          no_key=_OPENAI_NO_KEY, own_key=True, catch_all=False, bench=("ws",))
OPENAI = Door("openai", "/v1", "tokenpipe.server.openai.routes:router", _openai,
              ("openai_chat", "openai_completions"), no_key=_OPENAI_NO_KEY, bench=("sse",),
              fast="tokenpipe.server.openai.lean:lean_routes")
ANTHROPIC = Door(
    "anthropic", "/v1/messages", "tokenpipe.server.anthropic.routes:router",
    lambda status, message: anthropic_error(message, status=status), ("anthropic",),
    no_key=anthropic_error("invalid x-api-key: send x-api-key: KEY (or Authorization: "
                           "Bearer KEY)", status=401),
    not_found=lambda method, path: f"Not found: {method} {path}", bench=("anthropic",))
RESPONSES = Door("responses", "/v1/responses", "tokenpipe.server.responses.routes:router",
                 _openai, ("responses",), no_key=_OPENAI_NO_KEY, bench=("responses",))
OLLAMA = Door(
    "ollama", "/api", "tokenpipe.server.ollama.routes:routes",
    lambda status, message: ollama_error(message), ("ollama_chat", "ollama_generate"),
    no_key=ollama_error("unauthorized: missing or wrong API key (send Authorization: "
                        "Bearer KEY)"),
    not_found=lambda method, path: f"404 page not found: {method} {path}",
    wrong_method=lambda method, path, allowed: (f"method {method} not allowed on {path}; "
                                                f"use {allowed}"),
    bench=("ollama",))
DOORS: tuple[Door, ...] = (WS, OPENAI, ANTHROPIC, RESPONSES, OLLAMA)
