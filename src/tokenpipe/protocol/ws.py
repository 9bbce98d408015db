"""tokenpipe.v1 frames (PROTOCOL.md section 1): parsing of client frames, building of
server frames. Parsing errors are BadRequest with a message that names the field."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..errors import BadRequest
from ..types import GenerationRequest, Message, SamplingParams

PROTOCOL = "tokenpipe.v1"
StreamId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
StopString = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WireMessage(_Frame):
    role: Literal["system", "user", "assistant"]
    content: str


class Params(_Frame):
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[StopString] = Field(default_factory=list, max_length=16)

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
            messages = tuple(Message(m.role, m.content) for m in self.messages)
        return GenerationRequest(messages, self.prompt, self.params.to_sampling(), self.model)


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
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise BadRequest("frame is not valid JSON") from None
    if not isinstance(raw, dict):
        raise BadRequest("frame must be a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise BadRequest("field 'type' is missing or not a string", param="type")
    model = _BY_TYPE.get(kind)
    if model is None:
        raise BadRequest(f"unknown frame type {kind!r}", param="type")
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as exc:
        raise BadRequest(_describe(exc), param=_field(exc)) from None


def frame_id(text: str) -> str | None:
    """Best effort: the `id` of a frame that failed to parse, so its error can name it."""
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


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


def hello(server: str, models: list[str], limits: dict[str, int]) -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL, "server": server, "models": models,
            "limits": limits}


def error(
    code: str, message: str, stream_id: str | None = None, retry_after_ms: int | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "id": stream_id, "code": code, "message": message}
    if retry_after_ms is not None:
        frame["retry_after_ms"] = retry_after_ms
    return frame
