"""The fast path of the two OpenAI generation routes: `Generation`, a plain ASGI handler.
FastAPI's request handler (dependency solving, its body parsing, its response pipeline)
cost the hop (`--engine openai`) about a fifth of its CPU per request; `Generation` reads
the body once and words every error as FastAPI did. The FastAPI routes of the same paths
(routes.py) document them in /docs and serve when these are not mounted; the door table
(doors.py, `fast`) puts these before every other route."""

from __future__ import annotations

import asyncio
import email.message
import logging
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ...errors import TokenpipeError
from ...protocol.common import BadBody, read_json
from ...protocol.openai.completions import CompletionRequest
from ...protocol.openai.errors import OpenAIError, bad_body, validation_error
from ...protocol.openai.render import ChatRender, CompletionRender
from ...protocol.openai.requests import ChatCompletionRequest
from ...types import GenerationRequest
from .routes import Body, Render, resumable_of, start
from .session_response import error_response

log = logging.getLogger("tokenpipe.openai")
# A body larger than this is parsed, validated and converted in a worker thread: six
# 440 KiB schemas sent at once held the event loop (and every stream's next frame) for
# about 100 ms there (issue 31).
LARGE_BODY = 64 << 10
_SERVED: dict[str, tuple[type[Body], Render]] = {
    "/v1/chat/completions": (ChatCompletionRequest, ChatRender),
    "/v1/completions": (CompletionRequest, CompletionRender),
}


def lean_routes() -> list[Route]:
    """The generation routes as plain Starlette routes, served by `Generation`; put first,
    a generation request is matched by the first route it meets (FastAPI's router walks
    its included routes with context bookkeeping for each)."""
    return [Route(path, Generation(model, render), methods=["POST"])
            for path, (model, render) in _SERVED.items()]


class Generation:
    """The ASGI handler of one generation route: the body read once, validated with the
    route's model, started; every refusal in OpenAI's shape, worded as FastAPI did."""

    def __init__(self, model: type[Body], render: Render) -> None:
        self.model = model
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        log.debug("%s: the lean handler", scope["path"])
        request = Request(scope, receive)
        try:
            raw = await request.body()
        except ClientDisconnect:
            return
        content_type = request.headers.get("content-type")
        try:
            if len(raw) > LARGE_BODY:  # off the event loop: other clients' streams go on
                body, converted = await asyncio.to_thread(self._read_large, raw, content_type)
            else:
                body, converted = self._read(raw, content_type), None
        except ValidationError as exc:
            response = error_response(validation_error(exc.errors()))
        except OpenAIError as exc:
            response = error_response(exc)
        else:
            try:
                resumable = resumable_of(body, request)
            except OpenAIError as exc:
                response = error_response(exc)
            else:
                response = await start(request.app.state.runtime, body, self.render,
                                       resumable, converted)
        await response(scope, receive, send)

    def _read(self, raw: bytes, content_type: str | None) -> Body:
        return self.model.model_validate(_json_body(raw, content_type))

    def _read_large(self, raw: bytes, content_type: str | None
                    ) -> tuple[Body, GenerationRequest | None]:
        """_read, and the request the body converts to (its schemas written out as text
        again: ~6 ms for a 440 KiB one) where it converts; its refusal, if any, is
        start()'s to word."""
        body = self._read(raw, content_type)
        try:
            return body, body.to_request()
        except TokenpipeError:
            return body, None


def _json_body(raw: bytes, content_type: str | None) -> Any:
    """The body as FastAPI reads it (strict content type): JSON when it says so, else the
    bytes (which no model takes); JSON it cannot parse is an OpenAIError."""
    if not raw:
        return None
    if content_type is None:
        return raw
    if content_type != "application/json" and not _says_json(content_type):
        return raw
    try:
        return read_json(raw)
    except BadBody as exc:
        raise bad_body(exc) from None


def _says_json(content_type: str) -> bool:
    """application/json or application/*+json, parameters and case as email reads them."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


def unparsable(cause: BaseException) -> str:
    """Why a body json.loads refused is not JSON we take (nested too deeply, a number too
    long): FastAPI itself says only "There was an error parsing the body"."""
    why = "it is nested too deeply" if isinstance(cause, RecursionError) else str(cause)
    return f"We could not parse the JSON body of your request: {why}"
