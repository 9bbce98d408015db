"""What every HTTP door's routes share that needs Starlette: the request's JSON body (in
the door's words), the server's Runtime, and the catch-all after a door's routes, which
answers every other path and method under its prefix in the door's words (doors.py
`Door.not_found`, `Door.wrong_method`) and shape (`Door.error`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Route

from ..errors import TokenpipeError
from ..protocol.common import BadBody, read_json
from .doors import METHODS, Door
from .runtime import Runtime


async def json_body(request: Request, worded: Callable[[BadBody], TokenpipeError], *,
                    strict: bool = False) -> Any:
    """The body as JSON whatever its content type says (protocol/common.read_json); what
    it is not, raised as `worded` says it in the door's words."""
    try:
        return read_json(await request.body(), strict=strict)
    except BadBody as exc:
        raise worded(exc) from None


def runtime_of(request: Request) -> Runtime:
    """What the doors share (runtime.py), from the app serving this request."""
    runtime: Runtime = request.app.state.runtime
    return runtime


def catch_all(door: Door, served: Sequence[BaseRoute]) -> list[Route]:
    """Routes for the door's prefix and everything below it: 405 with `Allow` where one of
    `served` (the door's routes) takes the path with other methods, else 404."""
    async def answer(request: Request) -> Response:
        method, path = request.method, request.url.path
        methods: set[str] = set()
        for route in served:
            match, _ = route.matches(request.scope)
            if match is Match.PARTIAL and isinstance(route, Route) and route.methods:
                methods |= route.methods
        if not methods:
            return JSONResponse(door.error(404, door.not_found(method, path)), status_code=404)
        allowed = ", ".join(m for m in METHODS if m in methods)
        response = JSONResponse(door.error(405, door.wrong_method(method, path, allowed)),
                                status_code=405)
        response.headers["allow"] = allowed
        return response

    return [Route(path, answer, methods=list(METHODS), include_in_schema=False)
            for path in (door.prefix, door.prefix + "/{path:path}")]
