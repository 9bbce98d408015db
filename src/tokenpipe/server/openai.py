"""/v1: the OpenAI-compatible routes (docs/protocol.md section 3). Thin: parse, submit, hand the
session to SessionResponse. Every error on these routes has OpenAI's shape and status (400
for validation, where FastAPI would say 422)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import TokenpipeError, Unauthorized, UnknownModel
from ..protocol.openai import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    ErrorResponse,
    ModelCard,
    ModelList,
    OpenAIError,
    sse_openapi,
    validation_error,
)
from .openai_serving import ChatRender, CompletionRender, SessionResponse, error_response
from .runtime import Runtime
from .security import key_matches


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


_STARTED = int(time.time())
_bearer = HTTPBearer(auto_error=False, description="Needed when the server has an API key.")


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def require_key(request: Request,
                      _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                      ) -> None:
    """The bearer dependency only documents the scheme in /docs; key_matches decides."""
    key = _runtime(request).settings.api_key
    if key and not key_matches(key, request.headers.get("authorization"), []):
        raise Unauthorized("Incorrect or missing API key: send Authorization: Bearer KEY")


router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute,
                   dependencies=[Depends(require_key)])

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


@router.post("/chat/completions", response_model=ChatCompletion,
             responses=_responses(ChatCompletionChunk, _CHAT_SSE))
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    """A chat answer from the model, whole or streamed token by token."""
    return await _start(request, body, ChatRender)


@router.post("/completions", response_model=Completion,
             responses=_responses(Completion, _TEXT_SSE))
async def completions(body: CompletionRequest, request: Request) -> Response:
    """A raw-text continuation (no chat template), whole or streamed."""
    return await _start(request, body, CompletionRender)


@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(request: Request) -> ModelList:
    return ModelList(data=[_card(request, m) for m in _models(request)])


@router.get("/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
async def get_model(model_id: str, request: Request) -> ModelCard:
    if model_id not in _models(request):
        raise UnknownModel(f"The model '{model_id}' does not exist", param="model")
    return _card(request, model_id)


@router.api_route("/{path:path}", include_in_schema=False,
                  methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
async def not_found(request: Request) -> Response:
    path = request.url.path
    allowed = _ROUTES.get(path) or ("GET" if path.startswith("/v1/models/") else None)
    if allowed is not None:  # a known route asked with the wrong method
        exc = OpenAIError(f"Method {request.method} not allowed on {path}; use {allowed}",
                          param=None, openai_code=None)
        exc.status = 405
        response = error_response(exc)
        response.headers["Allow"] = allowed
        return response
    exc = OpenAIError(f"Invalid URL ({request.method} {path})", param=None, openai_code=None)
    exc.status = 404
    return error_response(exc)


_ROUTES = {"/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST"}


def _models(request: Request) -> list[str]:
    runtime = _runtime(request)
    runtime.require()  # 503 while the model loads
    return runtime.models


def _card(request: Request, model_id: str) -> ModelCard:
    context = _runtime(request).require(model_id).engine.info.context_tokens
    return ModelCard(id=model_id, created=_STARTED, max_model_len=context)


async def _start(request: Request, body: ChatCompletionRequest | CompletionRequest,
                 render: type[ChatRender | CompletionRender]) -> Response:
    runtime = _runtime(request)
    scheduler = runtime.require(body.model)
    try:
        session = await scheduler.start(body.to_request())
    except TokenpipeError as exc:  # name the field this client sent
        if exc.param == "max_tokens":
            exc.param = body.max_tokens_param
        elif exc.param == "messages" and isinstance(body, CompletionRequest):
            exc.param = "prompt"
        raise
    return SessionResponse(
        session, render(session.model), stream=bool(body.stream),
        include_usage=body.include_usage, ping_s=runtime.settings.sse_ping_interval_s)


class FastCompletions:
    """ASGI middleware: the two generation routes without FastAPI's routing and dependency
    machinery, which cost the hop (`--engine openai`) about a fifth of its CPU per request
    (docs/deployment.md). Only the plain case is served here: a JSON body that validates,
    the right key or none needed. Anything else, errors included, goes on to the FastAPI
    routes above with the body replayed, so they alone word every error and document the
    API."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _FAST_ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body came
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        response = await self._plain(scope, body, *route)
        if response is None:
            await self.app(scope, _replay(body, receive), send)
        else:
            await response(scope, receive, send)

    async def _plain(self, scope: Scope, raw: bytes,
               model: type[ChatCompletionRequest | CompletionRequest],
               render: type[ChatRender | CompletionRender]) -> Response | None:
        app = scope.get("app")
        runtime: Runtime | None = getattr(getattr(app, "state", None), "runtime", None)
        if runtime is None:
            return None
        json_body = authorization = None
        for name, value in scope["headers"]:  # the first of each, as Starlette reads them
            if name == b"content-type" and json_body is None:
                json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
            elif name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
        key = runtime.settings.api_key
        if not json_body or (key and not key_matches(key, authorization, [])):
            return None
        try:
            body = model.model_validate(json.loads(raw))
        except (ValueError, ValidationError, RecursionError):  # JSONDecodeError, deep nesting
            return None
        request = Request(scope)
        try:
            return await _start(request, body, render)
        except TokenpipeError as exc:
            return error_response(exc)


_FAST_ROUTES: dict[str, tuple[type[ChatCompletionRequest | CompletionRequest],
                              type[ChatRender | CompletionRender]]] = {
    "/v1/chat/completions": (ChatCompletionRequest, ChatRender),
    "/v1/completions": (CompletionRequest, CompletionRender),
}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands over the body already read, then the client's own."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
