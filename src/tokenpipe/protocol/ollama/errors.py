"""Ollama's error shape, built here and nowhere else: `{"error": "message"}`, with Ollama's
statuses; tokenpipe's errors and pydantic's validation errors are mapped in this one place.

Ollama answers a full queue with 503 ("server busy"), not 429; an unknown model with 404
`model 'x' not found`, naming the model as the client sent it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...errors import BadRequest, TokenpipeError
from ..common import BadBody

# tokenpipe codes whose status differs on this door; the others keep their own
_STATUS = {"overloaded": 503, "too_many_streams": 503}
# the core's words for a parameter, as an Ollama request says them
_WORDS = {"max_tokens": (("limits.max_tokens is", "at most"), ("max_tokens", "num_predict"))}
# a schema's field, as this door names it: its refusals lead with it (which one is wrong)
_SCHEMA_FIELDS = {"response_format": "format", "tools": "tools"}


def error_json(message: str) -> dict[str, Any]:
    """The one Ollama error object."""
    return {"error": message}


class OllamaError(BadRequest):
    """A request Ollama would refuse: 400 unless `status` says otherwise."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status


def status_of(exc: TokenpipeError) -> int:
    return exc.status if isinstance(exc, OllamaError) else _STATUS.get(exc.code, exc.status)


def message_of(exc: TokenpipeError, model: str | None = None) -> str:
    """`exc`'s message in this door's words: the model as the client named it, the option
    names of its `options`."""
    if exc.code == "unknown_model" and model is not None:
        return f"model '{model}' not found"
    message = exc.message
    for core, ours in _WORDS.get(exc.param or "", ()):
        message = message.replace(core, ours)
    field = _SCHEMA_FIELDS.get(exc.param or "")
    if field and exc.code == "bad_request" and not message.startswith(field):
        message = f"{field}: {message}"
    return message


def error_body(exc: TokenpipeError, model: str | None = None) -> dict[str, Any]:
    return error_json(message_of(exc, model))


def bad_body(exc: BadBody) -> OllamaError:
    """A body that is not JSON we take (protocol/common.read_json, strict), in Ollama's
    words."""
    if exc.kind == "empty":
        return OllamaError("missing request body")
    if exc.kind == "syntax":
        return OllamaError(f"the body is not JSON: {exc.detail} (line {exc.line}, column "
                           f"{exc.column})")
    if exc.kind == "constant":
        return OllamaError(f"the body is not JSON: {exc.detail} is not a JSON number")
    why = "it is nested too deeply" if exc.kind == "deep" else exc.detail
    return OllamaError(f"the body is not JSON we take: {why}")


def param_name(loc: Sequence[int | str]) -> str:
    """('messages', 0, 'content') -> 'messages[0].content'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_RANGE = ("less_than", "less_than_equal", "greater_than", "greater_than_equal", "too_long",
          "too_short")


def validation_error(errors: Sequence[Any]) -> OllamaError:
    """The first of pydantic's validation errors as one clear sentence."""
    if not errors:
        return OllamaError("invalid request")
    err = errors[0]
    loc = list(err.get("loc", ()))
    kind: str = err.get("type", "")
    param = param_name(loc)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ").rstrip(".")
    got = json.dumps(err.get("input"), default=str)[:80]
    if not loc and kind in ("model_type", "model_attributes_type", "dict_type"):
        return OllamaError("the request body must be a JSON object")
    if kind.startswith("unsupported") or (not loc and kind == "invalid_value"):
        return OllamaError(msg, param=param or None)  # our own sentence, whole
    if kind == "missing" or (loc == ["model"] and kind == "string_too_short"):
        return OllamaError(f"{param} is required", param=param)
    if kind == "extra_forbidden":
        what = "option" if len(loc) == 2 and loc[0] == "options" else "field"
        return OllamaError(f"unknown {what} '{loc[-1] if what == 'option' else param}'",
                           param=param)
    if kind.endswith("_type") or kind == "int_from_float":
        return OllamaError(f"invalid type for '{param}': {msg[0].lower()}{msg[1:]} "
                           f"(got {got})", param=param)
    if kind in _RANGE:
        return OllamaError(f"invalid '{param}': {msg[0].lower()}{msg[1:]} (got {got})",
                           param=param)
    return OllamaError(f"invalid value for '{param}': {msg[0].lower()}{msg[1:]}", param=param)
