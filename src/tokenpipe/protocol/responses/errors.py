"""The Responses API's errors, mapped here and nowhere else. Over HTTP they are OpenAI's
`{"error": {message, type, param, code}}` (protocol/openai/errors.py builds it, with this
door's parameter names); a failure once a response exists is the response's own `error`
(`code` one of OpenAI's ResponseError codes) and, in a stream, an `error` event."""

from __future__ import annotations

from typing import Any

from ...errors import TokenpipeError
from ..openai.errors import OpenAIError, error_body, validation_error

_ITEM_TAGS = {"message", "function_call", "function_call_output",  # requests.InputItem
              "reasoning"}

# the core's parameter names -> this door's (a context overflow names max_tokens)
FIELDS = {"max_tokens": "max_output_tokens", "messages": "input", "prompt": "input",
          "think": "reasoning.effort"}
# tokenpipe codes -> ResponseError.code (a closed list in OpenAI's SDK)
_FAILURE_CODES = {"overloaded": "rate_limit_exceeded", "too_many_streams": "rate_limit_exceeded",
                  "bad_request": "invalid_prompt", "context_overflow": "invalid_prompt"}


def http_body(exc: TokenpipeError) -> dict[str, Any]:
    """`exc` as the HTTP error body, in OpenAI's shape with this door's names."""
    return error_body(exc, FIELDS)


def request_error(errors: Any) -> OpenAIError:
    """A request body's validation errors as the 400, an input item's union tag left out
    of where (`input[0].role`, not `input[0].message.role`)."""
    untagged = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if len(loc) > 2 and loc[0] == "input" and isinstance(loc[1], int) and (
                loc[2] in _ITEM_TAGS):
            error = {**error, "loc": (*loc[:2], *loc[3:])}
        untagged.append(error)
    return validation_error(untagged)


def failure(exc: TokenpipeError) -> dict[str, Any]:
    """The response object's `error` when the generation failed after it began."""
    return {"code": _FAILURE_CODES.get(exc.code, "server_error"), "message": exc.message}


def error_event(exc: TokenpipeError, sequence_number: int) -> dict[str, Any]:
    """The stream's `error` event: the HTTP body's code, message and param."""
    err = http_body(exc)["error"]
    return {"type": "error", "code": err["code"], "message": err["message"],
            "param": err["param"], "sequence_number": sequence_number}


def not_found(response_id: str, *, param: str | None = None) -> OpenAIError:
    return OpenAIError(f"Response with id '{response_id}' not found.", param=param,
                       openai_code=None, status=404)


def bad(message: str, param: str | None = None) -> OpenAIError:
    """A 400 in OpenAI's shape, for what the routes check themselves."""
    return OpenAIError(message, param=param, openai_code="invalid_value" if param else None)
