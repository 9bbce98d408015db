"""Anthropic Messages request bodies (docs/protocol.md, "Anthropic Messages HTTP"), text
only for now:

- `messages`: `user` / `assistant` turns in the order given, `content` a string or a list
  of `text` blocks (joined with newlines); any other block type (image, document, tool_use,
  tool_result, thinking, ...) is a 400 naming the field. A last `assistant` message (a
  prefill) is refused as Anthropic refuses it on models without prefill: the core renders
  every message as a closed turn, so it cannot continue one.
- `system`: a string or `text` blocks. `max_tokens` is required, as Anthropic requires it;
  `model` may be absent (the server's model), as on the OpenAI door.
- Sampling: `temperature` (absent: 1, as Anthropic), `top_p`, `top_k`, `stop_sequences`.
- Accepted and ignored (they do not change the answer): `metadata`, `service_tier`,
  `cache_control` (also on blocks), `speed`, `inference_geo`, `diagnostics`,
  `user_profile_id`, `workspace_id`. Neutral values of what is not supported pass
  (`tools: []`, `thinking: {"type": "disabled"}`); anything else is refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ...types import GenerationRequest, Message, SamplingParams

MAX_STOP = 16  # as the OpenAI door: the core's stop matcher checks each one per piece
_BLOCK_FIELDS = {"type", "text", "cache_control", "citations"}


def _text(value: str, at: str) -> str:
    """A lone surrogate (the JSON escape "\\ud800") is not text: it cannot be tokenized."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise PydanticCustomError("invalid_value", "text with a lone UTF-16 surrogate "
                                      "(\\ud800-\\udfff) is not valid Unicode",
                                      {"at": at} if at else None) from None
    return value


def _block_text(block: Any, at: str) -> str:
    """One content block's text; a block of any other type is refused, naming where."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise PydanticCustomError("invalid_type", "a content block is an object with a "
                                  "string `type`", {"at": at})
    kind = block["type"]
    if kind != "text":
        raise PydanticCustomError(
            "unsupported_value", "content blocks of type '{kind}' are not supported yet: "
            "this server reads text only", {"at": f"{at}.type", "kind": kind})
    if not isinstance(block.get("text"), str):
        raise PydanticCustomError("invalid_type", "Input should be a valid string",
                                  {"at": f"{at}.text"})
    extra = sorted(set(block) - _BLOCK_FIELDS)
    if extra:
        raise PydanticCustomError("extra_forbidden", "Extra inputs are not permitted",
                                  {"at": f"{at}.{extra[0]}"})
    if not isinstance(block.get("cache_control", {}), dict | None):
        raise PydanticCustomError("invalid_type", "Input should be a valid dictionary",
                                  {"at": f"{at}.cache_control"})
    if not isinstance(block.get("citations", []), list | None):
        raise PydanticCustomError("invalid_type", "Input should be a valid list",
                                  {"at": f"{at}.citations"})
    if block.get("citations"):  # null or [] pass: nothing else can be honoured
        raise PydanticCustomError("unsupported_value", "citations are not supported",
                                  {"at": f"{at}.citations"})
    return _text(block["text"], f"{at}.text")


def _flatten(value: Any) -> Any:
    """A string, or text blocks joined with newlines (their order kept)."""
    if isinstance(value, str):
        return _text(value, "")
    if isinstance(value, list):
        return "\n".join(_block_text(block, str(i)) for i, block in enumerate(value))
    return value  # not text: the str field refuses it with pydantic's own words


_TEXT_BLOCK = {"type": "object", "required": ["type", "text"], "additionalProperties": False,
               "properties": {"type": {"const": "text"}, "text": {"type": "string"},
                              "cache_control": {"type": ["object", "null"],
                                                "description": "Accepted and ignored."},
                              "citations": {"type": ["array", "null"], "maxItems": 0}}}
_CONTENT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}],
                   "description": "Text, or a list of `text` blocks (joined with newlines); "
                                  "other block types are refused for now."}
Content = Annotated[str, BeforeValidator(_flatten), WithJsonSchema(_CONTENT_SCHEMA)]
# Optional as one nullable field: an error names `system`, not a branch of a union
OptionalContent = Annotated[str | None, BeforeValidator(_flatten), WithJsonSchema(
    {**_CONTENT_SCHEMA, "anyOf": [*_CONTENT_SCHEMA["anyOf"], {"type": "null"}]})]


def _refuse(neutral: tuple[Any, ...], message: str) -> Any:
    """A validator that lets the neutral values through and refuses the rest."""

    def check(value: Any) -> Any:
        if value is None or any(value == n and type(value) is type(n) for n in neutral):
            return None
        raise PydanticCustomError("unsupported_parameter", message)

    return BeforeValidator(check)


Refused = SkipJsonSchema[Any]  # hidden from the schema: they exist only to be refused
Ignored = SkipJsonSchema[Any]  # accepted whatever they hold, and ignored


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class InputMessage(_Body):
    role: Literal["user", "assistant"]
    content: Content

    def to_message(self) -> Message:
        return Message(self.role, self.content)


class _Prompt(_Body):
    """What /v1/messages and /v1/messages/count_tokens share: the conversation."""

    model: str | None = Field(default=None, description="A model id from /v1/models; "
                              "absent means the server's model (Anthropic requires it).")
    messages: list[InputMessage] = Field(min_length=1)
    system: OptionalContent = None
    # #17: map tools / tool_choice to the core's tool request here, once it has one.
    tools: Annotated[Refused, _refuse(([],), "tool use is not supported yet")] = None
    tool_choice: Annotated[Refused, _refuse(({"type": "none"},),
                                            "tool use is not supported yet")] = None
    thinking: Annotated[Refused, _refuse(({"type": "disabled"},),
                                         "extended thinking is not supported")] = None
    # #17: map output_config.format (structured outputs) here, once the core constrains.
    output_config: Annotated[Refused, _refuse(({},), "output_config (structured output "
                                              "formats, effort) is not supported yet")] = None
    cache_control: Ignored = Field(default=None, description="Accepted and ignored.")
    speed: Ignored = None
    inference_geo: Ignored = None
    diagnostics: Ignored = None
    user_profile_id: Ignored = None
    workspace_id: Ignored = None

    @model_validator(mode="after")
    def _no_prefill(self) -> _Prompt:
        if self.messages[-1].role == "assistant":
            raise PydanticCustomError(
                "unsupported_value", "This server does not support assistant message "
                "prefill: the conversation must end with a user message",
                {"at": f"messages.{len(self.messages) - 1}"})
        return self

    def _messages(self) -> tuple[Message, ...]:
        turns = tuple(m.to_message() for m in self.messages)
        if self.system is None:
            return turns
        return (Message("system", self.system), *turns)


class MessagesRequest(_Prompt):
    """POST /v1/messages."""

    max_tokens: int = Field(ge=1, description="Required, as Anthropic requires it.")
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0,
                                      description="Absent means 1, as Anthropic; 0 is greedy.")
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, description="0: off.")
    stop_sequences: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=MAX_STOP,
        description="Up to 16 strings; the first one generated ends the answer and is "
                    "never part of it.")
    metadata: dict[str, Any] | None = Field(default=None, description="Accepted and ignored.")
    service_tier: str | None = Field(default=None, description="Accepted and ignored.")
    container: Annotated[Refused, _refuse((), "containers (code execution) are not "
                                          "supported")] = None
    mcp_servers: Annotated[Refused, _refuse(([],), "MCP servers are not supported")] = None

    def to_request(self) -> GenerationRequest:
        params = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=self.top_k or 0,
            stop=tuple(self.stop_sequences or ()),
        )
        return GenerationRequest(messages=self._messages(), params=params, model=self.model)


class CountTokensRequest(_Prompt):
    """POST /v1/messages/count_tokens: the prompt only, counted as a generation counts it."""

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(messages=self._messages(), model=self.model)
