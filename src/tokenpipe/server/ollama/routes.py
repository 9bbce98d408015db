"""/api: Ollama's API (docs/protocol.md section 4), as plain Starlette routes. Thin: parse,
name the served model, start, hand the session to NdjsonResponse. Every answer under
/api/, errors included, has Ollama's shape; the API key is checked before any route
(security.RequireKey).

Bodies are JSON whatever their Content-Type says, as Ollama reads them (`curl -d` sends
application/x-www-form-urlencoded).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ...config import ENGINES, engine_kind
from ...errors import TokenpipeError
from ...protocol.ollama import names
from ...protocol.ollama.embed import (
    EmbedRequest,
    LegacyEmbeddingsRequest,
    embed_answer,
    legacy_answer,
)
from ...protocol.ollama.errors import OllamaError, bad_body, error_json, validation_error
from ...protocol.ollama.requests import ChatRequest, GenerateRequest, ShowRequest
from ...protocol.ollama.responses import Answer, Kind, loaded_model, shown, tag
from ..doors import METHODS
from ..requests import json_body, runtime_of
from ..sessions import ModelRegistry
from .ndjson_response import JSON_TYPE, NdjsonResponse, error_response

# The Ollama version whose API (docs/api.md) these routes follow, for clients that check
OLLAMA_VERSION = "0.13.0"
_STARTED = datetime.now(UTC)  # when this server started serving its models
Body = TypeVar("Body", bound=BaseModel)


def routes() -> list[BaseRoute]:
    """Ollama's routes, and 501 for those this server does not serve (the door's catch-all,
    doors.py, answers Ollama's 404 and 405 after them)."""
    return [
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/generate", generate, methods=["POST"]),
        Route("/api/tags", list_tags, methods=["GET", "HEAD"]),
        Route("/api/show", show, methods=["POST"]),
        Route("/api/embed", embed, methods=["POST"]),
        Route("/api/embeddings", embeddings, methods=["POST"]),
        Route("/api/ps", list_loaded, methods=["GET"]),
        Route("/api/version", version, methods=["GET", "HEAD"]),
        *(Route(path + "{rest:path}", not_served, methods=list(METHODS))
          for path in _NOT_SERVED),
    ]


async def chat(request: Request) -> Response:
    """A chat answer from the model, streamed as NDJSON unless `stream` is false."""
    return await _generation(request, ChatRequest, chat=True)


async def generate(request: Request) -> Response:
    """A completion of `prompt` (through the chat template unless `raw`)."""
    return await _generation(request, GenerateRequest, chat=False)


async def _generation(request: Request, model: type[ChatRequest | GenerateRequest], *,
                      chat: bool) -> Response:
    try:
        body = await _body(request, model)
    except ClientDisconnect:
        return Response(status_code=400)  # nobody reads it
    except OllamaError as exc:
        return error_response(exc)
    models = _models(request)
    answer = Answer(body.model, chat=chat)
    try:
        served = _served(models, body.model)
        # how long it stays loaded after this request (None: the configured keep-alive);
        # only where models come and go (--load-on-demand): else no client unloads one
        if models.clients_unload:
            models.slot(served).keep_alive_once = body.keep_alive_s
        if body.loads_only:  # Ollama's "load the model" (keep_alive 0: "unload it")
            if body.keep_alive_s == 0 and models.clients_unload:
                await models.unload(served)
                return JSONResponse(answer.unloaded(), media_type=JSON_TYPE)
            await models.load(served)
            return JSONResponse(answer.loaded(), media_type=JSON_TYPE)
        session = await models.start(body.to_request(served),
                                     api="ollama_chat" if chat else "ollama_generate")
    except TokenpipeError as exc:
        return error_response(exc, body.model)
    return NdjsonResponse(session, answer, stream=body.streamed)


async def embed(request: Request) -> Response:
    """`embeddings`: one L2-normalized vector per input text, from a model that embeds."""
    return await _embedding(request, EmbedRequest)


async def embeddings(request: Request) -> Response:
    """Ollama's older route: `prompt` -> `embedding` (never truncated)."""
    return await _embedding(request, LegacyEmbeddingsRequest)


async def _embedding(request: Request,
                     model: type[EmbedRequest | LegacyEmbeddingsRequest]) -> Response:
    started = time.perf_counter()
    try:
        body = await _body(request, model)
    except ClientDisconnect:
        return Response(status_code=400)
    except OllamaError as exc:
        return error_response(exc)
    models = _models(request)
    try:
        served = _served(models, body.model)
        models.slot(served).keep_alive_once = body.keep_alive_s
        if isinstance(body, EmbedRequest):
            embedded = await models.embed(served, body.inputs(), truncate=body.truncate,
                                          dimensions=body.dimensions)
            return JSONResponse(embed_answer(body.model, embedded,
                                             time.perf_counter() - started))
        return JSONResponse(legacy_answer(await models.embed(served, body.inputs())))
    except TokenpipeError as exc:
        return error_response(exc, body.model)


async def list_tags(request: Request) -> Response:
    """Every served model, named as Ollama lists models (with a tag)."""
    models = _models(request)
    try:
        listed = [tag(names.listed(n), _kind(models.info(n).name), _STARTED) for n in models.names]
    except TokenpipeError as exc:  # 503 when no model can serve
        return error_response(exc)
    return JSONResponse({"models": listed})


async def list_loaded(request: Request) -> Response:
    """The models in memory, each with when it unloads (its keep-alive after idle)."""
    models = _models(request)
    loaded = []
    for slot in models.loaded:
        info = models.info(slot.name) if slot.info is None else slot.info
        loaded.append(loaded_model(names.listed(slot.name), _kind(info.name), info.context_tokens,
                                   slot.expires_at, busy=slot.busy))
    return JSONResponse({"models": loaded})


async def show(request: Request) -> Response:
    """What this server knows of one model; 404 for a model it does not serve."""
    try:
        body = await _body(request, ShowRequest)
    except ClientDisconnect:
        return Response(status_code=400)
    except OllamaError as exc:
        return error_response(exc)
    if body.requested is None:
        return error_response(OllamaError("model is required"))
    models = _models(request)
    try:
        served = _served(models, body.requested)
        info = models.info(served)
    except TokenpipeError as exc:
        return error_response(exc, body.requested)
    return JSONResponse(shown(names.listed(served), _kind(info.name), info.context_tokens,
                              _STARTED, embeds=info.embeds, generates=info.generates,
                              thinks=info.thinks is True))


def _kind(engine: str) -> Kind:
    """The listings' view of an engine, from its declared capabilities."""
    if engine not in ENGINES:
        return Kind()
    caps = engine_kind(engine).capabilities
    return Kind(gguf=caps.model_files == "gguf", tools=caps.constrains)


async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION})


# Ollama's routes this server does not serve: it serves the models it was started with
_NOT_SERVED = ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete",
               "/api/blobs/")


async def not_served(request: Request) -> Response:
    return JSONResponse(error_json(
        f"{request.url.path} is not supported: this server serves the models it was started "
        "with (GET /api/tags lists them)"), status_code=501)


def _served(models: ModelRegistry, requested: str) -> str:
    """The served model an Ollama name means; the name itself when none fits (the start
    refuses it as unknown); 404 naming the candidates when several fit."""
    found = names.matches(requested, models.names)
    if len(found) > 1:
        raise OllamaError(f"model '{requested}' not found: it could be any of "
                          f"{', '.join(found)}; send one of these names", status=404)
    return found[0] if found else requested


def _models(request: Request) -> ModelRegistry:
    return runtime_of(request).models


async def _body(request: Request, model: type[Body]) -> Body:
    """The body validated with `model`; OllamaError for what is not a JSON object of it."""
    data = await json_body(request, bad_body, strict=True)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from None
