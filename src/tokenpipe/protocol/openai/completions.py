"""The /v1/completions request body (docs/protocol.md section 3): raw text in, no chat
template, or a prompt of token ids, read as it is (vLLM's shape); the sampling fields and
their rules are the chat body's (requests.py)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from ...types import GenerationRequest
from ..common import check_text as _text
from ..common import neutral_only as _refuse
from .requests import Refused, _Sampling


def _one_prompt(value: Any) -> Any:
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], str | list):
            return _one_prompt(value[0])
        if value and all(isinstance(v, str) for v in value):
            raise PydanticCustomError("unsupported_value", "one prompt per request: batches "
                                      "of prompts are not supported")
        if value and all(type(v) is int and v >= 0 for v in value):
            return value  # token ids, read as they are
        raise PydanticCustomError("unsupported_value", "a prompt is text, or token ids "
                                  "(non-negative integers), one prompt per request")
    return _text(value)


class CompletionRequest(_Sampling):
    """POST /v1/completions: raw text in, no chat template. `max_tokens` defaults to 16 as
    OpenAI's; `echo`, `suffix` and `best_of` > 1 answer 400."""

    prompt: Annotated[
        str | list[int], BeforeValidator(_one_prompt),
        WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                                  {"type": "array", "items": {"type": "string", "minLength": 1},
                                   "minItems": 1, "maxItems": 1},
                                  {"type": "array", "items": {"type": "integer", "minimum": 0},
                                   "minItems": 1}]}),
    ]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: Annotated[Refused, _refuse((False,), "echo is not supported")] = None
    suffix: Annotated[Refused, _refuse(("",), "suffix (insertion) is not supported")] = None
    best_of: Annotated[Refused, _refuse((1,), "best_of > 1 is not supported")] = None
    logprobs: int | None = Field(default=None, ge=0, le=20, description="Each answer "
                                 "token's log-probability with this many likeliest tokens "
                                 "(OpenAI allows up to 5, this server 20).")

    max_tokens_param: ClassVar[str] = "max_tokens"

    @property
    def logprobs_top(self) -> int | None:
        return self.logprobs

    def to_request(self) -> GenerationRequest:
        text, ids = (self.prompt, None) if isinstance(self.prompt, str) else (
            "", tuple(self.prompt))
        return GenerationRequest(prompt=text, prompt_ids=ids,
                                 params=self.sampling(self.max_tokens), model=self.model,
                                 format=self.format, token_ids=bool(self.return_token_ids))
