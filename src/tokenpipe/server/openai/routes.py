"""/v1: the OpenAI-compatible routes (docs/protocol.md section 3). Thin: parse, start, hand
the session to SessionResponse. Every error on these routes has OpenAI's shape and status
(400 for validation, where FastAPI would say 422); the API key is checked before any route
(security.RequireKey).

The two generation routes are documented by FastAPI (their signatures give /docs its
schema) but served by `Generation`, a plain ASGI handler: FastAPI's request handler
(dependency solving, its body parsing, its response pipeline) cost the hop (`--engine
openai`) about a fifth of its CPU per request. `Generation` reads the body once and words
every error as FastAPI did. Without `lean_routes()` in the app, FastAPI's routes serve.
"""

from __future__ import annotations

import email.message
import functools
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ...errors import BadRequest, TokenpipeError, UnknownModel
from ...protocol.openai.errors import OpenAIError, validation_error
from ...protocol.openai.render import ChatRender, CompletionRender
from ...protocol.openai.requests import ChatCompletionRequest, CompletionRequest
from ...protocol.openai.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    ErrorResponse,
    ModelCard,
    ModelList,
)
from ...protocol.openai.schema import sse_openapi
from ..runtime import Runtime
from .choices import ChoicesResponse, start_choices
from .resumable_sse import opted_in, resumed, started
from .session_response import SessionResponse, error_response

log = logging.getLogger("tokenpipe.openai")
Body = ChatCompletionRequest | CompletionRequest
Render = type[ChatRender | CompletionRender]


class OpenAIRoute(APIRoute):
    """Answers validation and tokenpipe errors in OpenAI's shape, for these routes only."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return error_response(validation_error(exc.errors()))
            except TokenpipeError as exc:
                return error_response(exc)

        return route


def lean_routes() -> list[Route]:
    """The generation routes as plain Starlette routes, served by `Generation`; the app puts
    them first, so a generation request is matched by the first route it meets (FastAPI's
    router walks its included routes with context bookkeeping for each). The FastAPI
    routes of the same paths below document them in /docs; without these they serve."""
    return [Route(path, Generation(model, render), methods=["POST"])
            for path, (model, render) in _SERVED.items()]


_STARTED = int(time.time())
# Only documents the scheme in /docs: security.RequireKey decides, before any route.
_bearer = HTTPBearer(auto_error=False, description="Needed when the server has an API key.")
router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute,
                   dependencies=[Depends(_bearer)])

_ERROR_TEXTS: dict[int | str, str] = {
    400: "Invalid request (`param` names the field), or prompt plus max_tokens do not fit "
         "the context (`code: context_length_exceeded`)",
    401: "Missing or wrong API key",
    404: "Unknown model (`code: model_not_found`)",
    429: "Overloaded: retry after the `Retry-After` header's seconds",
    500: "The engine failed before the first token",
    503: "The model is not loaded (yet), or the server is shutting down",
    "4XX": "Any other client error (never FastAPI's 422: validation answers 400)",
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text} for status, text in _ERROR_TEXTS.items()
}
_CHAT_SSE = (
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    '"finish_reason":null}],"usage":null,"system_fingerprint":null}\n\n'
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],'
    '"usage":null,"system_fingerprint":null}\n\n'
    'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],'
    '"usage":null,"system_fingerprint":null}\n\ndata: [DONE]\n\n'
)
_TEXT_SSE = (
    'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    '[{"index":0,"text":"Hi","logprobs":null,"finish_reason":null}],"usage":null,'
    '"system_fingerprint":null}\n\n'
    'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    '[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}],"usage":null,'
    '"system_fingerprint":null}\n\ndata: [DONE]\n\n'
)


def _responses(chunk: type[ChatCompletionChunk | Completion], example: str) -> dict[int | str,
                                                                                  Any]:
    ok = {"description": "JSON, or with `stream: true` server-sent events",
          "content": {"text/event-stream": sse_openapi(chunk, example)}}
    return {200: ok, **_ERRORS}


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    """A chat answer from the model, whole or streamed token by token."""
    return await start(_runtime(request), body, ChatRender, _resumable(body, request))


async def completions(body: CompletionRequest, request: Request) -> Response:
    """A raw-text continuation (no chat template), whole or streamed."""
    return await start(_runtime(request), body, CompletionRender, _resumable(body, request))


def _resumable(body: Body, request: Request) -> bool:
    """The body's `resumable`, else the X-Resumable header of a streamed request (looked
    up only then: a request that says nothing pays one attribute test)."""
    if body.resumable is not None or not body.stream:
        return bool(body.resumable)
    return opted_in(None, True, request.headers.get("x-resumable"))


async def resume_stream(
    token: str, request: Request,
    last_event_id: str | None = Query(default=None, description="Used when the "
                                      "Last-Event-ID header is absent."),
    last_event_id_header: str | None = Header(default=None, alias="Last-Event-ID",
                                              description="The last event id the client "
                                              "has: the events after it are sent."),
) -> Response:
    """A resumable stream (a Chat Completions or Completions request with `resumable`, or
    a tokenpipe.v1 one) from after Last-Event-ID, in Chat Completions chunks, to its end."""
    runtime = _runtime(request)
    return resumed(runtime.resumable, token, last_event_id_header, last_event_id,
                   runtime.settings.sse_ping_interval_s)




@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(request: Request) -> ModelList:
    return ModelList(data=[_card(request, m) for m in _models(request)])


@router.get("/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
async def get_model(model_id: str, request: Request) -> ModelCard:
    if model_id not in _models(request):
        raise UnknownModel(f"The model '{model_id}' does not exist", param="model")
    return _card(request, model_id)


async def not_found(request: Request) -> Response:
    path = request.url.path
    allowed = _ROUTES.get(path) or ("GET" if path.startswith(("/v1/models/", "/v1/streams/"))
                                    else None)
    if allowed is not None:  # a known route asked with the wrong method
        exc = OpenAIError(f"Method {request.method} not allowed on {path}; use {allowed}",
                          param=None, openai_code=None, status=405)
        response = error_response(exc)
        response.headers["Allow"] = allowed
        return response
    exc = OpenAIError(f"Invalid URL ({request.method} {path})", param=None, openai_code=None,
                      status=404)
    return error_response(exc)


_ROUTES = {"/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST"}


def _models(request: Request) -> list[str]:
    models = _runtime(request).models
    models.check_serving()  # 503 when no model can serve
    return models.names


def _card(request: Request, model_id: str) -> ModelCard:
    models = _runtime(request).models
    return ModelCard(id=model_id, created=_STARTED,
                     max_model_len=models.info(model_id).context_tokens,
                     state=models.slot(model_id).state.value)


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def start(runtime: Runtime, body: Body, render: Render,
                resumable: bool = False) -> Response:
    """The one start, and the answer: SessionResponse (ChoicesResponse for n > 1, a
    ResumableResponse when `resumable`), or the start's refusal."""
    n, limit = body.n or 1, runtime.settings.max_n
    if n > limit:
        return error_response(BadRequest(f"n ({n}) is above this server's limit of {limit} "
                                         "choices (--max-n)", param="n"))
    if resumable and n > 1:
        return error_response(BadRequest("a resumable stream has one choice: send n 1 (or "
                                         "none) with resumable", param="n"))
    api = "openai_chat" if isinstance(body, ChatCompletionRequest) else "openai_completions"
    try:
        if n > 1:
            sessions = await start_choices(functools.partial(runtime.models.start, api=api),
                                           body.to_request(), n)
        else:
            session = await runtime.models.start(body.to_request(), resumable=resumable,
                                                 api=api)
    except TokenpipeError as exc:  # in the names this client sent
        return error_response(exc, {"max_tokens": body.max_tokens_param})
    if n > 1:
        return ChoicesResponse(
            sessions, render(sessions[0].model, scored=body.wants_logprobs),
            stream=bool(body.stream), include_usage=body.include_usage,
            ping_s=runtime.settings.sse_ping_interval_s)
    if resumable:
        return started(runtime.resumable, session, render(session.model,
                                                          scored=body.wants_logprobs),
                       include_usage=body.include_usage,
                       ping_s=runtime.settings.sse_ping_interval_s)
    return SessionResponse(
        session, render(session.model, scored=body.wants_logprobs), stream=bool(body.stream),
        include_usage=body.include_usage, ping_s=runtime.settings.sse_ping_interval_s)


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
        try:
            body = self.model.model_validate(_json_body(raw, request.headers.get("content-type")))
        except ValidationError as exc:
            response = error_response(validation_error(exc.errors()))
        except OpenAIError as exc:
            response = error_response(exc)
        else:
            try:
                resumable = _resumable(body, request)
            except OpenAIError as exc:
                response = error_response(exc)
            else:
                response = await start(request.app.state.runtime, body, self.render,
                                       resumable)
        await response(scope, receive, send)


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
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OpenAIError(f"We could not parse the JSON body of your request: {exc.msg}",
                          param=None, openai_code=None) from None
    except RecursionError:
        raise OpenAIError(unparsable(RecursionError()), param=None, openai_code=None) from None
    except ValueError as exc:  # an integer over Python's digit limit
        raise OpenAIError(unparsable(exc), param=None, openai_code=None) from None


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


_SERVED: dict[str, tuple[type[Body], Render]] = {
    "/v1/chat/completions": (ChatCompletionRequest, ChatRender),
    "/v1/completions": (CompletionRequest, CompletionRender),
}
router.add_api_route("/chat/completions", chat_completions, methods=["POST"],
                     response_model=ChatCompletion,
                     responses=_responses(ChatCompletionChunk, _CHAT_SSE))
router.add_api_route("/completions", completions, methods=["POST"],
                     response_model=Completion, responses=_responses(Completion, _TEXT_SSE))
router.add_api_route("/streams/{token}", resume_stream, methods=["GET"],
                     responses=_responses(ChatCompletionChunk, _CHAT_SSE))
router.add_api_route("/{path:path}", not_found, include_in_schema=False,
                     methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
