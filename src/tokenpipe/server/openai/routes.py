"""/v1: the OpenAI-compatible routes (docs/protocol.md section 3). Thin: parse, start, hand
the session to SessionResponse. Every error on these routes has OpenAI's shape and status
(400 for validation, where FastAPI would say 422); the API key is checked before any route
(security.RequireKey), other paths and methods get the door's catch-all (doors.py).

The two generation routes are documented by FastAPI (their signatures give /docs its
schema) but served by lean.py's `Generation` (the fast path); without it, these serve.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from ...errors import BadRequest, TokenpipeError, UnknownModel
from ...protocol.openai.completions import CompletionRequest
from ...protocol.openai.embeddings import EmbeddingList, EmbeddingRequest, embedding_list
from ...protocol.openai.errors import validation_error
from ...protocol.openai.render import ChatRender, CompletionRender
from ...protocol.openai.requests import ChatCompletionRequest
from ...protocol.openai.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    ErrorResponse,
    ModelCard,
    ModelList,
)
from ...protocol.openai.schema import error_responses, sse_openapi
from ...types import GenerationRequest
from ..requests import runtime_of
from ..runtime import Runtime
from .choices import ChoicesResponse, start_choices
from .resumable_sse import ResumableResponse, opted_in, resumed, started
from .session_response import SessionResponse, error_response

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
_ERRORS = error_responses(ErrorResponse, _ERROR_TEXTS)
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
    return await start(runtime_of(request), body, ChatRender, resumable_of(body, request))


async def completions(body: CompletionRequest, request: Request) -> Response:
    """A raw-text continuation (no chat template), whole or streamed."""
    return await start(runtime_of(request), body, CompletionRender, resumable_of(body, request))


def resumable_of(body: Body, request: Request) -> bool:
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
    runtime = runtime_of(request)
    answer = await resumed(runtime.resumable, token, last_event_id_header, last_event_id,
                           runtime.settings.sse_ping_interval_s)
    if not isinstance(answer, ResumableResponse):  # its refusal
        return answer
    return runtime.followers.answer(answer, request.client.host if request.client
                                    else "unknown")


@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(request: Request) -> ModelList:
    return ModelList(data=[_card(request, m) for m in _models(request)])


@router.get("/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
async def get_model(model_id: str, request: Request) -> ModelCard:
    if model_id not in _models(request):
        raise UnknownModel(f"The model '{model_id}' does not exist", param="model")
    return _card(request, model_id)


def _models(request: Request) -> list[str]:
    models = runtime_of(request).models
    models.check_serving()  # 503 when no model can serve
    return models.names


def _card(request: Request, model_id: str) -> ModelCard:
    models = runtime_of(request).models
    info = models.info(model_id)
    return ModelCard(id=model_id, created=_STARTED, max_model_len=info.context_tokens,
                     state=models.slot(model_id).state.value,
                     capabilities=[*(["completion"] if info.generates else []),
                                   *(["thinking"] if info.thinks is True else []),
                                   *(["embedding"] if info.embeds else [])])


async def embeddings(body: EmbeddingRequest, request: Request) -> EmbeddingList:
    """One vector per input (a text, texts, or token ids), L2-normalized, from a model
    that embeds; usage counts the inputs' tokens."""
    models = runtime_of(request).models
    embedded = await models.embed(body.model, body.inputs(), dimensions=body.dimensions)
    return embedding_list(body.model or models.names[0], embedded, body.encoding_format)


async def start(runtime: Runtime, body: Body, render: Render,
                resumable: bool = False, converted: GenerationRequest | None = None
                ) -> Response:
    """The one start, and the answer: SessionResponse (ChoicesResponse for n > 1, a
    ResumableResponse when `resumable`), or the start's refusal. `converted`: the body's
    request where it was made already (lean.py, for a large body: off the loop)."""
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
                                           converted or body.to_request(), n)
        else:
            session = await runtime.models.start(converted or body.to_request(),
                                                 resumable=resumable, api=api)
    except TokenpipeError as exc:  # in the names this client sent
        return error_response(exc, {"max_tokens": body.max_tokens_param,
                                    "think": "reasoning_effort"})
    ids = bool(body.return_token_ids)
    if n > 1:
        return ChoicesResponse(
            sessions, render(sessions[0].model, scored=body.wants_logprobs, ids=ids),
            stream=bool(body.stream), include_usage=body.include_usage,
            ping_s=runtime.settings.sse_ping_interval_s)
    if resumable:
        return started(runtime.resumable, session, render(
                           session.model, scored=body.wants_logprobs, ids=ids),
                       include_usage=body.include_usage,
                       ping_s=runtime.settings.sse_ping_interval_s)
    return SessionResponse(
        session, render(session.model, scored=body.wants_logprobs, ids=ids),
        stream=bool(body.stream),
        include_usage=body.include_usage, ping_s=runtime.settings.sse_ping_interval_s)


router.add_api_route("/chat/completions", chat_completions, methods=["POST"],
                     response_model=ChatCompletion,
                     responses=_responses(ChatCompletionChunk, _CHAT_SSE))
router.add_api_route("/completions", completions, methods=["POST"],
                     response_model=Completion, responses=_responses(Completion, _TEXT_SSE))
router.add_api_route("/embeddings", embeddings, methods=["POST"],
                     response_model=EmbeddingList, responses=_ERRORS)
router.add_api_route("/streams/{token}", resume_stream, methods=["GET"],
                     responses=_responses(ChatCompletionChunk, _CHAT_SSE))
