"""Anthropic's error shape, built here and nowhere else: `{"type": "error", "error": {"type",
"message"}}`, for tokenpipe errors, pydantic's validation errors and the refusals made
before any route runs (a wrong key, a body over the limit). The one map from tokenpipe's
codes and statuses to Anthropic's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import BadRequest, TokenpipeError
from ..common import BadBody

# A full queue is 529 overloaded_error, not 429 rate_limit_error. The anthropic SDK retries
# both alike (429 by name, 529 as a status >= 500; either honours retry-after-ms and
# retry-after), so what decides is the meaning: Anthropic answers 429 when the caller went
# over its own rate limit and 529 when the service has no capacity now, which is this.
OVERLOADED_STATUS = 529
_STATUSES = {"overloaded": OVERLOADED_STATUS}
_TYPES = {400: "invalid_request_error", 401: "authentication_error",
          403: "permission_error", 404: "not_found_error", 408: "timeout_error",
          413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error",
          OVERLOADED_STATUS: "overloaded_error"}


def error_type(status: int) -> str:
    """Anthropic's error `type` for an HTTP status."""
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_json(message: str, *, status: int = 400) -> dict[str, Any]:
    """The one Anthropic error object."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


class AnthropicError(BadRequest):
    """A request Anthropic would refuse with `status` (400 unless said)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def status_of(exc: TokenpipeError) -> int:
    """The HTTP status Anthropic gives what `exc` means."""
    return _STATUSES.get(exc.code, exc.status)


# the core's parameter names -> this door's
_FIELDS = {"reasoning_budget": "thinking.budget_tokens", "think": "thinking",
           "response_format": "output_config.format"}


def error_body(exc: TokenpipeError) -> dict[str, Any]:
    """`exc` in Anthropic's shape; a `param` the core names leads the message, as Anthropic
    words its own ("max_tokens: ...")."""
    message = exc.message
    param = _FIELDS.get(exc.param, exc.param) if exc.param else None
    if param and not message.startswith(param):
        message = f"{param}: {message}"
    return error_json(message, status=status_of(exc))


def bad_body(exc: BadBody) -> AnthropicError:
    """A body that is not JSON we take (protocol/common.read_json), in Anthropic's words."""
    if exc.kind == "empty":
        return AnthropicError("The request body is empty: send a JSON object.")
    if exc.kind == "syntax":
        return AnthropicError(f"The request body is not valid JSON: {exc.detail} at line "
                              f"{exc.line} column {exc.column}")
    why = "it is nested too deeply" if exc.kind == "deep" else exc.detail
    return AnthropicError(f"The request body is not JSON we take: {why}")


def field_path(loc: Sequence[int | str]) -> str:
    """('messages', 0, 'content') -> 'messages.0.content', as Anthropic names fields."""
    return ".".join(str(p) for p in loc if p != "body")


def validation_error(errors: Sequence[Any]) -> AnthropicError:
    """The first of pydantic's validation errors, as Anthropic words them
    ("messages.0.role: Input should be 'user' or 'assistant'")."""
    if not errors:
        return AnthropicError("invalid request")
    err = errors[0]
    loc = list(err.get("loc", ()))
    ctx = err.get("ctx") or {}
    at = ctx.get("at")  # a custom error's place below the field it was raised for
    path = field_path([*loc, *str(at).split(".")] if at is not None else loc)
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if not path and kind in ("missing", "model_attributes_type", "model_type", "dict_type"):
        return AnthropicError("The request body must be a JSON object.")
    return AnthropicError(f"{path}: {msg}" if path else msg)
