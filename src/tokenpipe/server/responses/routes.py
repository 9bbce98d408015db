"""/v1/responses: OpenAI's Responses API (docs/protocol.md, "OpenAI Responses HTTP"). Thin:
parse, continue a stored conversation, start, hand the session to SessionResponse (or, in
the background, to a Run that BackgroundResponse streams follow); GET, DELETE,
input_items and cancel read the runs and the store: the runs of this replica, then those
another runs (announced in a store shared with `--state`, followed here), then the stored
responses.
Every error has OpenAI's shape, unknown paths and wrong methods too (the door's
catch-all, doors.py); the API key is checked before any route (RequireKey).

The handlers read and validate the body themselves (FastAPI would answer 422 in its own
shape); the request model is documented in /docs through `openapi_extra`. The router's
lifespan opens the door's state (the store, lazily) and closes it at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from ...config import Settings, responses_db_path
from ...errors import Overloaded, TokenpipeError
from ...protocol.openai.errors import bad_body
from ...protocol.openai.responses import ErrorResponse
from ...protocol.openai.schema import error_responses, inline_schema
from ...protocol.responses.answers import answer_of, replay
from ...protocol.responses.errors import bad, not_found, request_error
from ...protocol.responses.objects import ResponseShape, input_items
from ...protocol.responses.requests import ResponsesRequest
from ...protocol.responses.tools import check_outputs
from ..requests import json_body, runtime_of
from .runs import ResponsesState, Run, queued
from .session_response import (
    BackgroundResponse,
    EventsResponse,
    SessionResponse,
    error_response,
)
from .store import (
    Pending,
    ResponseStore,
    SqliteResponseStore,
    message_of,
    row_bytes,
    turn,
)

CANCEL_WAIT_S = 10.0  # cancel: how long to wait for the cancelled response to be stored
FOLLOW_WAIT_S = 5.0  # another replica's background response: how long to wait for it to begin


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    runtime = app.state.runtime
    state = ResponsesState(_store(runtime.settings), runtime.resumable)
    app.state.responses = state
    try:
        yield
    finally:
        await state.aclose()


def _store(settings: Settings) -> ResponseStore:
    """One SQLite file per replica; with `--state`, the replicas' shared Redis."""
    s = settings
    if s.state is None:
        return SqliteResponseStore(
            responses_db_path(s), max_age_s=s.responses_max_age_s,
            max_count=s.responses_max_count, max_row_bytes=s.responses_max_row_bytes,
            max_bytes=s.responses_max_bytes)
    from ..state import shared_responses

    return shared_responses(s.state, s.state_prefix, max_age_s=s.responses_max_age_s,
                            max_count=s.responses_max_count,
                            max_row_bytes=s.responses_max_row_bytes,
                            max_bytes=s.responses_max_bytes)


router = APIRouter(prefix="/v1/responses", tags=["responses"], lifespan=_lifespan)
_ERROR_TEXTS: dict[int | str, str] = {
    400: "Invalid request (`param` names the field), or the prompt plus "
         "max_output_tokens do not fit the context",
    401: "Missing or wrong API key",
    404: "Unknown model (`code: model_not_found`) or response id",
    405: "A known path with the wrong method (`Allow` says which)",
    413: "The body is over --max-body-bytes",
    429: "Overloaded: retry after the `Retry-After` header's seconds",
    500: "The engine failed before the first token",
    503: "The model is not loaded (yet), or the server is shutting down",
    "4XX": "Any other client error (never FastAPI's 422: validation answers 400)",
}
_ERRORS = error_responses(ErrorResponse, _ERROR_TEXTS)
_SSE = {"text/event-stream": {"itemSchema": {
    "type": "object", "required": ["data"],
    "properties": {"event": {"type": "string", "description": "the data's `type`"},
                   "data": {"type": "string", "contentMediaType": "application/json"}},
    "description": "Each event names its type and holds one JSON object with a "
                   "sequence_number; comment lines (`: ping`, `: queued position=N`) keep "
                   "idle streams alive."}, "example": (
    'event: response.created\ndata: {"type":"response.created","response":{...},'
    '"sequence_number":0}\n\n'
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    '"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[],'
    '"sequence_number":4}\n\n')}}
_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": inline_schema(ResponsesRequest)}}}}


@router.post("", openapi_extra=_BODY, responses={200: {
    "description": "The response object, or with `stream: true` its server-sent events "
                   "(response.created ... response.completed, each with sequence_number)",
    "content": _SSE, "links": {
        name: {"operationId": op, "parameters": {"response_id": "$response.body#/id"}}
        for name, op in (("Retrieve", "retrieve_response"), ("Delete", "delete_response"),
                         ("Cancel", "cancel_response"), ("InputItems", "list_input_items"))}},
    **_ERRORS}, operation_id="create_response")
async def create_response(request: Request) -> Response:
    """A response from the model: whole, streamed, or in the background."""
    runtime, state = runtime_of(request), _state(request)
    try:
        body = ResponsesRequest.model_validate(await json_body(request, bad_body))
        conversation = await _previous(state, body.previous_response_id)
        history = tuple(message_of(entry) for entry in conversation)
        generation = body.to_request(history)
        unanswered = check_outputs(generation.messages or ())
        if unanswered is not None:
            raise bad(f"No tool call found for function call output with call_id "
                      f"{unanswered}.", "input")
        pending = Pending(input_items(body), [*conversation, *(turn(m) for m in body.turns())])
        if body.stored:
            _check_row(state, pending)
        client = _client(request)
        if body.background:
            _check_background(state, runtime.settings, client)
        session = await runtime.models.start(generation, resumable=bool(body.background),
                                             api="responses")
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is left to read it
    except ValidationError as exc:
        return error_response(request_error(exc.errors()))
    except TokenpipeError as exc:
        return error_response(exc)
    shape = ResponseShape.new(body, session.model)
    ping_s = runtime.settings.sse_ping_interval_s or None
    if body.background:
        run = Run(session, shape, body.items, pending, state.store, client)
        await state.launch(run)
        if body.stream:
            return BackgroundResponse(run, state.streams, -1, ping_s)
        return JSONResponse(run.snapshot())

    async def keep(final: dict[str, Any], text: str) -> None:
        await state.store.put(pending.stored(final, text))

    return SessionResponse(session, answer_of(shape, body.items), stream=bool(body.stream),
                           keep=keep if body.stored else None, ping_s=ping_s or 0)


def _check_row(state: ResponsesState, pending: Pending) -> None:
    """A 400 before anything runs where what the response would store (its input, the
    conversation it continues) is over the store's per-response cap."""
    size = row_bytes(pending.input_items, pending.conversation)
    if size > state.store.max_row_bytes:
        raise bad(f"this response would store {size} bytes (its input and the conversation "
                  f"it continues), over this server's {state.store.max_row_bytes}", "input")


def _check_background(state: ResponsesState, settings: Settings, client: str) -> None:
    """A 429 where this client address has its share of background responses running:
    one client's slow runs must not fill the queue every other client needs."""
    cap = max(1, min(settings.max_background_per_client, settings.max_queue // 4))
    if state.running(client) >= cap:
        raise Overloaded(f"this client has {cap} background responses running, this "
                         f"server's limit per client: wait for one to end or cancel one",
                         retry_after_ms=1000)


@router.get("/{response_id}", responses={200: {
    "description": "The response; with `stream=true` (background responses) its events "
                   "after `starting_after`", "content": _SSE}, **_ERRORS},
            operation_id="retrieve_response")
async def get_response(response_id: str, request: Request) -> Response:
    """A stored (or running background) response; `stream=true&starting_after=N` resumes
    a background response's events after sequence number N."""
    state = _state(request)
    try:
        stream = _flag(request, "stream")
        after = _int(request, "starting_after", -1)
        _no_include(request)
        run = state.find(response_id)
        if run is not None and not run.deleted:
            return _running(state, run, stream, after, request)
        # the record before the row: a put replaces the one with the other at once
        record = await state.store.announced(response_id)
        if record is not None:  # another replica runs it
            run = await state.follow(record, FOLLOW_WAIT_S if stream else 0)
            if run is not None:
                return _running(state, run, stream, after, request)
            if not stream:
                return JSONResponse(queued(record))
            raise _not_begun()
        row = await state.store.get(response_id)
        if row is None:
            raise not_found(response_id)
        if not stream:
            return JSONResponse(row.response)
        if row.stream is None:
            raise bad("Only background responses can be streamed with GET; this one was "
                      "answered when it was created.", "stream")
        events, last = replay(row.response, row.stream, after)
        if after > last:
            raise bad(f"starting_after {after} is beyond the stream's last event ({last})",
                      "starting_after")
        return EventsResponse(events)
    except TokenpipeError as exc:
        return error_response(exc)


def _running(state: ResponsesState, run: Run, stream: bool, after: int,
             request: Request) -> Response:
    """A running background response (here or followed from another replica): the
    response now, or its events after `after`."""
    if not stream:
        return JSONResponse(run.snapshot())
    run.check_after(after)
    follower = BackgroundResponse(run, state.streams, after, _ping(request))
    return runtime_of(request).followers.answer(follower, _client(request))


def _not_begun() -> TokenpipeError:
    return Overloaded("this background response is queued on another replica and has not "
                      "begun yet: retry", retry_after_ms=1000)


@router.delete("/{response_id}", responses=_ERRORS, operation_id="delete_response")
async def delete_response(response_id: str, request: Request) -> Response:
    """Forgets a stored response (a running background one is cancelled, here or on the
    replica that runs it, and not stored)."""
    state = _state(request)
    run = state.runs.get(response_id)
    try:
        record = None
        if run is not None and not run.deleted:
            run.deleted = True
            run.session.cancel()
        else:
            record = await state.store.announced(response_id)
        found = await state.store.delete(response_id) or run is not None
    except TokenpipeError as exc:
        return error_response(exc)
    if record is not None:  # marked deleted (never stored) first, then cancelled there
        elsewhere = await state.follow(record, FOLLOW_WAIT_S)
        if elsewhere is not None:  # else still queued there: it runs, and is not stored
            elsewhere.session.cancel()
    if not found:
        return error_response(not_found(response_id))
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


@router.post("/{response_id}/cancel", responses=_ERRORS, operation_id="cancel_response")
async def cancel_response(response_id: str, request: Request) -> Response:
    """Cancels a background response; answers it as it ended (status cancelled, unless it
    had ended already)."""
    state = _state(request)
    run = state.runs.get(response_id)
    if run is not None and not run.deleted:
        run.session.cancel()
        await state.settle(run, CANCEL_WAIT_S)
        return JSONResponse(run.snapshot())
    try:
        record = await state.store.announced(response_id)
        if record is not None:  # another replica runs it: the cancel is carried there
            run = await state.follow(record, FOLLOW_WAIT_S)
            if run is None:
                raise _not_begun()
            run.session.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.session.done.wait(), CANCEL_WAIT_S)
            return JSONResponse(run.snapshot())
        row = await state.store.get(response_id)
    except TokenpipeError as exc:
        return error_response(exc)
    if row is None:
        return error_response(not_found(response_id))
    if row.stream is None:
        return error_response(bad("Only background responses can be cancelled."))
    return JSONResponse(row.response)


@router.get("/{response_id}/input_items", responses=_ERRORS,
            operation_id="list_input_items")
async def list_input_items(response_id: str, request: Request) -> Response:
    """The response's input items (`order` desc by default, `limit` 1-100, `after` an id)."""
    state = _state(request)
    try:
        limit = _int(request, "limit", 20)
        if not 1 <= limit <= 100:
            raise bad("limit must be between 1 and 100", "limit")
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise bad("order must be 'asc' or 'desc'", "order")
        _no_include(request)
        run = state.runs.get(response_id)
        if run is not None and not run.deleted:
            items = run.pending.input_items
        elif (record := await state.store.announced(response_id)) is not None:  # elsewhere
            items = record["input_items"]
        else:
            row = await state.store.get(response_id)
            if row is None:
                raise not_found(response_id)
            items = row.input_items
    except TokenpipeError as exc:
        return error_response(exc)
    items = items[::-1] if order == "desc" else list(items)
    after = request.query_params.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    page = items[:limit]
    return JSONResponse({"object": "list", "data": page,
                         "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None,
                         "has_more": len(items) > limit})


async def _previous(state: ResponsesState, response_id: str | None) -> list[list[str]]:
    """The conversation a previous response continues (its input and output after its own
    history); [] without one."""
    if response_id is None:
        return []
    if response_id in state.runs or await state.store.announced(response_id):
        raise bad(f"Previous response '{response_id}' is still in progress: wait for it "
                  "(or cancel it) first.", "previous_response_id")
    row = await state.store.get(response_id)
    if row is None:
        raise not_found(response_id, param="previous_response_id")
    if row.response.get("status") not in ("completed", "incomplete"):
        raise bad(f"Previous response '{response_id}' has status "
                  f"{row.response.get('status')}: only an answered one can be continued.",
                  "previous_response_id")
    return row.conversation


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise bad(f"{name} must be true or false", name)
    return value in ("true", "1")


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # int() also takes " 5", "5_0" and other scripts' digits ("٥"): ASCII digits only
    if not (raw.removeprefix("-").isascii() and raw.removeprefix("-").isdigit()):
        raise bad(f"{name} must be an integer", name)
    value = int(raw)
    if value < -1:
        raise bad(f"{name} must be -1 or more", name)
    return value


def _no_include(request: Request) -> None:
    # #17: include values (e.g. reasoning.encrypted_content) once such output exists
    if any(v for k, v in request.query_params.multi_items() if k.startswith("include")):
        raise bad("include is not supported: nothing it names (logprobs, encrypted "
                  "reasoning, tool sources) is produced here", "include")


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _ping(request: Request) -> float | None:
    return runtime_of(request).settings.sse_ping_interval_s or None


def _state(request: Request) -> ResponsesState:
    state: ResponsesState = request.app.state.responses
    return state
