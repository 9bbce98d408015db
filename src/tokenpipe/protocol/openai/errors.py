"""OpenAI's error shape, built here and nowhere else: `{"error": {message, type, param,
code}}` for tokenpipe errors, for pydantic's validation errors, and for the refusals the
server makes before any route runs (a wrong key, a body over the limit, a bad handshake)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import BadRequest, TokenpipeError
from ..common import BadBody

# tokenpipe error codes that OpenAI names differently; the others pass through
_OPENAI_CODES = {
    "context_overflow": "context_length_exceeded",
    "unknown_model": "model_not_found",
    "unauthorized": "invalid_api_key",
}
_TYPES = {401: "authentication_error", 403: "permission_error", 421: "permission_error",
          429: "rate_limit_error"}


def error_json(message: str, *, status: int = 400, kind: str | None = None,
               param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The one OpenAI error object; `kind` (OpenAI's `type`) defaults from the status (the
    core's errors name no door's types: their status says it)."""
    if kind is None:
        kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class OpenAIError(BadRequest):
    """A request OpenAI would refuse with 400; `openai_code` is OpenAI's code for it."""

    def __init__(self, message: str, *, param: str | None, openai_code: str | None,
                 status: int = 400) -> None:
        super().__init__(message, param=param)
        self.openai_code = openai_code
        self.status = status


def error_body(exc: TokenpipeError, fields: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`exc` in OpenAI's shape; `fields` maps a core param name to the name this request
    used for it (max_tokens sent as max_completion_tokens)."""
    if isinstance(exc, OpenAIError):
        code = exc.openai_code
    else:
        code = _OPENAI_CODES.get(exc.code, exc.code)
    param = exc.param if fields is None or exc.param is None else fields.get(exc.param,
                                                                             exc.param)
    return error_json(exc.message, status=exc.status, param=param, code=code)


def bad_body(exc: BadBody) -> OpenAIError:
    """A body that is not JSON we take (protocol/common.read_json), in OpenAI's words."""
    if exc.kind == "empty":
        return OpenAIError("The request body is empty: send a JSON object.", param=None,
                           openai_code=None)
    why = "it is nested too deeply" if exc.kind == "deep" else exc.detail
    return OpenAIError(f"We could not parse the JSON body of your request: {why}",
                       param=None, openai_code=None)


def param_name(loc: Sequence[int | str]) -> str | None:
    """('messages', 0, 'content') -> 'messages[0].content', as OpenAI names parameters."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


_ABOVE = ("less_than", "less_than_equal", "too_long")
_BELOW = ("greater_than", "greater_than_equal", "too_short")


def validation_error(errors: Sequence[Any]) -> OpenAIError:
    """The first of FastAPI's validation errors, as OpenAI words it."""
    if not errors:
        return OpenAIError("invalid request", param=None, openai_code=None)
    err = errors[0]
    loc = [p for p in err.get("loc", ()) if p != "body"]
    kind: str = err.get("type", "")
    ctx = err.get("ctx") or {}
    # a validator names the field as `param` (absolute) or `field` (inside its loc)
    param = ctx.get("param") or param_name([*loc, ctx["field"]] if "field" in ctx else loc)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ").rstrip(".")
    got = err.get("input")
    if kind == "json_invalid":
        return OpenAIError("We could not parse the JSON body of your request: "
                           f"{ctx.get('error', 'invalid JSON')}", param=None, openai_code=None)
    if not loc and kind in ("missing", "model_attributes_type", "model_type", "dict_type"):
        return OpenAIError("The request body must be a JSON object (Content-Type: "
                           "application/json).", param=None, openai_code=None)
    if kind == "missing":
        return OpenAIError(f"Missing required parameter: '{param}'.", param=param,
                           openai_code="missing_required_parameter")
    if kind == "extra_forbidden":
        return OpenAIError(f"Unrecognized request argument supplied: {param}", param=param,
                           openai_code="unknown_parameter")
    if kind in ("unsupported_parameter", "unsupported_value"):
        return OpenAIError(f"Unsupported value for '{param}': {msg}.", param=param,
                           openai_code=kind)
    if kind.endswith("_type") or kind == "int_from_float":
        return OpenAIError(f"Invalid type for '{param}': {msg.lower()}.", param=param,
                           openai_code="invalid_type")
    if kind in _ABOVE or kind in _BELOW:
        limit = next(iter(ctx.values()), got)  # the bound's type is the field's
        number = "integer" if isinstance(limit, int) else "decimal"
        side = "above_max" if kind in _ABOVE else "below_min"
        code = f"{number}_{side}_value" if not kind.startswith("too_") else "invalid_value"
        return OpenAIError(f"Invalid '{param}': {msg.lower()} (got {json.dumps(got)[:80]}).",
                           param=param, openai_code=code)
    return OpenAIError(f"Invalid value for '{param}': {msg}.", param=param,
                       openai_code="invalid_value")

