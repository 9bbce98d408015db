"""tokenpipe.v1 frames (docs/protocol.md section 1), every one in and out: client frames
parsed (errors are BadRequest with a message that names the field), server frames built,
and a tokenpipe error worded as this protocol's error frame."""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError

from ..errors import BadRequest, TokenpipeError
from ..sampling_defaults import FIELDS, given
from ..types import (
    Delta,
    Event,
    Finished,
    GenerationRequest,
    Message,
    Progress,
    Queued,
    SamplingParams,
    Started,
    TokenLogprob,
    ToolCall,
)
from .formats import (
    MessageToolCall,
    ResponseFormat,
    ToolChoiceField,
    ToolSpec,
    check_tools,
    tool_choice_of,
)

PROTOCOL = "tokenpipe.v1"
BEARER_PREFIX = "tokenpipe.bearer."  # + base64url(key): how a browser sends its API key
StreamId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
StopString = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WireMessage(_Frame):
    """A turn: `tool_calls` on an assistant turn that made calls, `tool_call_id` on a
    `tool` turn (a call's result), in OpenAI's shapes."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: list[MessageToolCall] | None = Field(default=None, max_length=128)
    tool_call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None

    def to_message(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise BadRequest("only assistant messages have tool_calls", param="messages")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise BadRequest("a tool message needs tool_call_id, and only a tool message "
                             "has one", param="messages")
        calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments)
                      for c in self.tool_calls or ())
        return Message(self.role, self.content, calls, self.tool_call_id)


class Params(_Frame):
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0, le=2**31 - 1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[StopString] = Field(default_factory=list, max_length=16)
    response_format: ResponseFormat | None = None
    tools: list[ToolSpec] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoiceField = None
    parallel_tool_calls: bool | None = None
    reasoning_format: Literal["none", "auto"] = "none"
    think: bool = False  # ask the model to think: one that cannot refuses (param "think")
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)

    def to_sampling(self) -> SamplingParams:
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=self.seed,
            stop=tuple(self.stop),
            logprobs=self.top_logprobs if self.logprobs else None,
            given=given(self, FIELDS),
        )


class Generate(_Frame):
    type: Literal["generate"]
    id: StreamId
    messages: list[WireMessage] | None = Field(default=None, min_length=1)
    prompt: Annotated[str, StringConstraints(min_length=1)] | None = None
    model: str | None = None
    params: Params = Field(default_factory=Params)
    resumable: bool = False

    def to_request(self) -> GenerationRequest:
        if (self.messages is None) == (self.prompt is None):
            raise BadRequest("generate needs exactly one of messages or prompt", param="messages")
        messages = None
        if self.messages is not None:
            messages = tuple(m.to_message() for m in self.messages)
        params = self.params
        if params.top_logprobs and not params.logprobs:
            raise BadRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
        fmt = None if params.response_format is None else params.response_format.to_format()
        if params.tools and self.prompt is not None:
            raise BadRequest("tools need messages (a chat), not a raw prompt",
                             param="tools")
        try:
            check_tools(params.tools, params.tool_choice)
        except PydanticCustomError as exc:
            raise BadRequest(exc.message(), param=(exc.context or {}).get("param")) from None
        return GenerationRequest(
            messages, self.prompt, params.to_sampling(), self.model, fmt,
            tuple(t.to_tool() for t in params.tools or ()),
            tool_choice_of(params.tool_choice, params.parallel_tool_calls),
            split_reasoning=params.reasoning_format == "auto", think=params.think)


class Cancel(_Frame):
    type: Literal["cancel"]
    id: StreamId


class Resume(_Frame):
    type: Literal["resume"]
    stream: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    after_seq: int = Field(ge=-1)
    id: StreamId | None = None


class Ping(_Frame):
    type: Literal["ping"]
    data: Any = None


ClientFrame = Generate | Cancel | Resume | Ping
_BY_TYPE: dict[str, type[_Frame]] = {
    "generate": Generate,
    "cancel": Cancel,
    "resume": Resume,
    "ping": Ping,
}


def parse_client_frame(text: str) -> ClientFrame:
    raw = _loads(text)
    if not isinstance(raw, dict):
        raise BadRequest("frame must be a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise BadRequest("field 'type' is missing or not a string", param="type")
    model = _BY_TYPE.get(kind)
    if model is None:
        raise BadRequest(f"unknown frame type {kind[:64]!r}", param="type")
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as exc:
        raise BadRequest(_describe(exc), param=_field(exc)) from None


def frame_id(text: str) -> str | None:
    """Best effort: the `id` of a frame that failed to parse, so its error can name it
    (only an id the protocol allows: anything else could not even be sent back)."""
    try:
        raw = _loads(text)
    except BadRequest:
        return None
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


# ---- strict JSON (RFC 8259) -------------------------------------------------------------
# json.loads accepts NaN/Infinity, turns 1e999 into inf, raises a bare ValueError on ints
# over Python's digit limit and decodes "\ud800" into a lone surrogate no UTF-8 encoder
# takes. Such values are marked while parsing and refused, naming their field, before any
# of them reaches a tokenizer or an echo.

_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_INT_DIGITS = 4000  # under Python's own 4300-digit int/str limit, far above any param
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a surrogate can only come from one
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Invalid:
    """Stands in for a JSON value that is not allowed; says what it was."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


def _loads(text: str) -> Any:
    marked: list[_Invalid] = []

    def mark(what: str) -> _Invalid:
        marked.append(_Invalid(what))
        return marked[-1]

    def parse_int(digits: str) -> int | _Invalid:
        n = len(digits) - digits.startswith("-")
        return mark(f"an integer of {n} digits is too long") if n > MAX_INT_DIGITS else int(digits)

    def parse_float(literal: str) -> float | _Invalid:
        value = float(literal)
        return mark(f"the number {literal[:24]} is out of range") if math.isinf(value) else value

    try:
        raw = json.loads(text, parse_int=parse_int, parse_float=parse_float,
                         parse_constant=lambda name: mark(f"{name} is not valid JSON (RFC 8259)"))
    except RecursionError:
        raise BadRequest("frame is nested too deeply") from None
    except ValueError:  # JSONDecodeError included
        raise BadRequest("frame is not valid JSON") from None
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    if marked or surrogates:  # the common frame costs one regex search, no walk
        _check(raw, surrogates=surrogates)
    return raw


def _check(raw: Any, *, surrogates: bool) -> None:
    """Raises BadRequest naming a value that was marked invalid or holds a lone surrogate.
    Iterative: whatever json.loads could nest, this walks without recursing."""
    stack: list[tuple[str, Any]] = [("", raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if surrogates and _SURROGATE.search(key):
                    _refuse(path, "a key holds a lone UTF-16 surrogate (not valid Unicode)")
                stack.append((f"{path}.{key}" if path else key, item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item)
                         for i, item in enumerate(value))
        elif isinstance(value, _Invalid):
            _refuse(path, value.what)
        elif surrogates and isinstance(value, str) and _SURROGATE.search(value):
            _refuse(path, "a lone UTF-16 surrogate (\\ud800-\\udfff) is not valid Unicode")


def _refuse(path: str, what: str) -> None:
    if not path:
        raise BadRequest(f"frame: {what}")
    path = path[:200]  # keys are the client's: an error never echoes a megabyte
    raise BadRequest(f"field '{path}': {what}", param=path)


def _field(exc: ValidationError) -> str | None:
    errors = exc.errors()
    return ".".join(str(p) for p in errors[0]["loc"]) if errors else None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "frame"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{loc}'")
        elif err["type"] == "missing":
            parts.append(f"missing field '{loc}'")
        else:
            parts.append(f"field '{loc}': {err['msg']}")
    return "; ".join(parts)


# ---- server frames --------------------------------------------------------------------


def dumps(frame: dict[str, Any]) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def hello(server: str, models: dict[str, str], limits: dict[str, int]) -> dict[str, Any]:
    """`models`: each model's state (available, loading, loaded, failed), in order."""
    return {"type": "hello", "protocol": PROTOCOL, "server": server, "models": list(models),
            "model_states": models, "limits": limits}


def pong(data: Any) -> dict[str, Any]:
    return {"type": "pong", "data": data}


def error(
    code: str, message: str, stream_id: str | None = None, retry_after_ms: int | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "id": stream_id, "code": code, "message": message}
    if retry_after_ms is not None:
        frame["retry_after_ms"] = retry_after_ms
    return frame


def error_of(exc: TokenpipeError, stream_id: str | None = None) -> dict[str, Any]:
    """A tokenpipe error as this protocol's frame (a max_tokens above hello's
    limits.max_tokens is context_overflow, as on every door)."""
    if type(exc) is BadRequest and exc.param:  # e.g. a response_format the engine refused
        where = f"params.{exc.param}" if exc.param in Params.model_fields else exc.param
        return error("bad_request", f"field '{where}': {exc.message}", stream_id)
    return error(exc.code, exc.message, stream_id, exc.retry_after_ms)


def event_frame(stream_id: str, event: Event) -> dict[str, Any]:
    """A session event as the frame of stream `stream_id`."""
    if isinstance(event, Delta):
        delta: dict[str, Any] = {"type": "delta", "id": stream_id, "seq": event.seq,
                                 "text": event.text}
        if event.channel != "content":  # only a client that asked for tools gets these
            delta["channel"] = event.channel
            if event.channel == "tool_call":
                delta["index"] = event.index
                if event.call_id is not None:
                    delta["call_id"], delta["name"] = event.call_id, event.name
        elif event.logprobs:  # only a client that asked for logprobs gets these
            delta["logprobs"] = [_logprob(e) for e in event.logprobs]
        return delta
    if isinstance(event, Queued):
        if event.loading:  # its model is loading (load on demand): no place in a queue yet
            return {"type": "queued", "id": stream_id, "position": 0, "loading": True}
        return {"type": "queued", "id": stream_id, "position": event.position}
    if isinstance(event, Progress):  # only a long prompt's, before its first delta
        return {"type": "progress", "id": stream_id, "prompt_tokens_done": event.done,
                "prompt_tokens": event.total}
    if isinstance(event, Started):
        frame: dict[str, Any] = {"type": "start", "id": stream_id, "model": event.model,
                                 "prompt_tokens": event.prompt_tokens}
        if event.stream is not None:
            frame["stream"] = event.stream
        return frame
    if isinstance(event, Finished):
        t = event.timing
        return {
            "type": "end",
            "id": stream_id,
            "finish_reason": event.reason.value,
            "usage": {"prompt_tokens": event.usage.prompt_tokens,
                      "completion_tokens": event.usage.completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": event.usage.cached_tokens},
                      "completion_tokens_details": {
                          "reasoning_tokens": event.usage.reasoning_tokens,
                          "accepted_prediction_tokens": event.usage.accepted_tokens,
                          "rejected_prediction_tokens": event.usage.drafted_tokens
                          - event.usage.accepted_tokens}},
            "timing": {"queue_ms": t.queue_ms, "ttft_ms": t.ttft_ms, "total_ms": t.total_ms,
                       "tokens_per_s": t.tokens_per_s,
                       "drafted_tokens": event.usage.drafted_tokens,
                       "accepted_tokens": event.usage.accepted_tokens},
        }
    return error_of(event.error, stream_id)


def _logprob(e: TokenLogprob) -> dict[str, Any]:
    """A token's entry, in OpenAI's chat shape."""
    return {"token": e.token, "logprob": e.logprob, "bytes": list(e.data),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(b)}
                             for t, lp, b in e.top]}


class EventText:
    """Session events of one stream as frame text. A delta (nearly every frame) is filled
    into a template instead of going through a dict and json.dumps: the same bytes."""

    __slots__ = ("_head", "stream_id")

    def __init__(self, stream_id: str) -> None:
        self.stream_id = stream_id
        self._head = '{"type":"delta","id":' + encode_basestring(stream_id) + ',"seq":'

    def __call__(self, event: Event) -> str:
        if isinstance(event, Delta) and event.channel == "content" and not event.logprobs:
            return f'{self._head}{event.seq},"text":{encode_basestring(event.text)}}}'
        return dumps(event_frame(self.stream_id, event))
