"""OpenAI Responses request bodies (docs/protocol.md, "OpenAI Responses HTTP"), text and
function tools:

- `input`: a string (one user message) or a list of items: messages, `{"type": "message",
  "role", "content"}` or the short form without `type`; roles user, assistant, system,
  developer (read as system); `content` a string or `input_text` / `output_text` parts
  (joined with newlines); and `function_call` / `function_call_output` items (tools.py).
  Other item and part types are a 400 naming where.
- `tools` (function tools), `tool_choice`, `parallel_tool_calls`: tools.py.
- `instructions`: a system message in front (not carried on by `previous_response_id`,
  as OpenAI's). Sampling: `temperature` (absent: 1), `top_p`, `max_output_tokens`, and
  tokenpipe's `seed`. `text.format`: text, json_object or json_schema, mapped as chat's
  `response_format` (protocol/formats.py).
- `reasoning.effort` other than `none` asks the model to think (the level is not applied;
  a model whose chat template has no thinking section refuses it, naming reasoning.effort):
  its thinking section comes as a `reasoning` item before the message (items.py).
  `reasoning` input items (a previous answer's, sent back) are accepted and dropped from
  the prompt, as earlier turns' thinking is on every door.
- Neutral values of what is not produced pass (`include: []`,
  `reasoning: {"summary": null}`, `truncation: "disabled"`);
  anything else is refused naming the parameter. Ignored: `service_tier`,
  `prompt_cache_key`, `safety_identifier`, `prompt_cache_retention`, `stream_options`.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ...sampling_defaults import given
from ...types import GenerationRequest, Message, OutputFormat, SamplingParams
from ..common import check_text as _text
from ..common import neutral_only as _refuse
from ..formats import JsonSchemaSpec, ResponseFormat
from .tools import (
    ChoiceField,
    FunctionCallItem,
    FunctionCallOutputItem,
    Tools,
    check_tools,
    tool_choice_of,
    with_calls,
)

_TEXT_PARTS = ("input_text", "output_text")


Refused = SkipJsonSchema[Any]  # hidden from the schema: they exist only to be refused
Ignored = SkipJsonSchema[Any]  # accepted whatever they hold, and ignored


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _part(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("type"), str) and (
            value["type"] not in _TEXT_PARTS):
        raise PydanticCustomError(
            "unsupported_value", "content parts of type '{kind}' are not supported yet: "
            "this server reads text only", {"kind": value["type"]})
    return value


class TextPart(_Body):
    type: Literal["input_text", "output_text"]
    text: Annotated[str, BeforeValidator(_text)]
    annotations: list[Any] | None = Field(default=None, description="Accepted and ignored "
                                          "(an output replayed as input carries them).")
    logprobs: list[Any] | None = Field(default=None, description="Accepted and ignored.")


_PART_SCHEMA = {"type": "object", "required": ["type", "text"], "additionalProperties": False,
                "properties": {"type": {"enum": list(_TEXT_PARTS)}, "text": {"type": "string"},
                               "annotations": {"type": ["array", "null"]},
                               "logprobs": {"type": ["array", "null"]}}}
_CONTENT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART_SCHEMA}],
                   "description": "Text, or a list of input_text / output_text parts (joined "
                                  "with newlines)."}


def _content(value: Any) -> Any:
    return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


_ITEMS = ("message", "function_call", "function_call_output", "reasoning")


def _item(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("type"), str) and (
            value["type"] not in _ITEMS):
        raise PydanticCustomError(
            "unsupported_value", "input items of type '{kind}' are not supported: this "
            "server reads message, function_call, function_call_output and reasoning items",
            {"kind": value["type"]})
    return value


def _kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _ITEMS else "message"


class InputMessage(_Body):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Annotated[list[Annotated[TextPart, BeforeValidator(_part)]],
                       BeforeValidator(_content), WithJsonSchema(_CONTENT_SCHEMA)] = Field(
        description="Text, or a list of input_text / output_text parts (joined with "
                    "newlines).")
    id: str | None = Field(default=None, max_length=256, description="Kept as the item's id.")
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    @property
    def text(self) -> str:
        return "\n".join(part.text for part in self.content)

    def to_message(self) -> Message:
        return Message("system" if self.role == "developer" else self.role, self.text)

    def item(self) -> dict[str, Any]:
        """This item as input_items lists it."""
        item_id = self.id or "msg_" + secrets.token_hex(24)
        if self.role == "assistant":
            return {"id": item_id, "type": "message", "role": "assistant",
                    "status": "completed", "content": [
                        {"type": "output_text", "text": self.text, "annotations": []}]}
        return {"id": item_id, "type": "message", "role": self.role, "status": "completed",
                "content": [{"type": "input_text", "text": self.text}]}


class ReasoningItem(_Body):
    """A thinking section an earlier answer held, sent back as input: listed, and dropped
    from the prompt (as every door drops earlier turns' thinking)."""

    type: Literal["reasoning"]
    id: str | None = Field(default=None, max_length=256, description="Kept as the item's id.")
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def item(self) -> dict[str, Any]:
        """This item as input_items lists it."""
        return {"id": self.id or "rs_" + secrets.token_hex(24), "type": "reasoning",
                "summary": self.summary, "content": self.content or [],
                "status": "completed"}


_STATUS_SCHEMA = {"enum": ["in_progress", "completed", "incomplete", None]}
_CALL_SCHEMA = {"type": "object", "required": ["type", "call_id", "name", "arguments"],
                "additionalProperties": False, "properties": {
                    "type": {"const": "function_call"}, "call_id": {"type": "string"},
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                    "arguments": {"type": "string"}, "id": {"type": ["string", "null"]},
                    "status": _STATUS_SCHEMA}}
_CALL_OUTPUT_SCHEMA = {"type": "object", "required": ["type", "call_id", "output"],
                       "additionalProperties": False, "properties": {
                           "type": {"const": "function_call_output"},
                           "call_id": {"type": "string"}, "output": _CONTENT_SCHEMA,
                           "id": {"type": ["string", "null"]}, "status": _STATUS_SCHEMA}}
_REASONING_SCHEMA = {"type": "object", "required": ["type"], "additionalProperties": False,
                     "properties": {"type": {"const": "reasoning"},
                                    "id": {"type": ["string", "null"]},
                                    "summary": {"type": "array", "items": {"type": "object"}},
                                    "content": {"type": ["array", "null"],
                                                "items": {"type": "object"}},
                                    "encrypted_content": {"type": ["string", "null"]},
                                    "status": _STATUS_SCHEMA}}
_INPUT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "contains": {
    "not": {"type": "object", "required": ["type"], "properties": {"type": {
        "const": "reasoning"}}}}, "items": {
    "anyOf": [{
        "type": "object", "required": ["role", "content"], "additionalProperties": False,
        "properties": {"type": {"const": "message"},
                       "role": {"enum": ["user", "assistant", "system", "developer"]},
                       "content": _CONTENT_SCHEMA, "id": {"type": ["string", "null"]},
                       "status": _STATUS_SCHEMA,
                       "phase": {"enum": ["commentary", "final_answer", None]}}},
        _CALL_SCHEMA, _CALL_OUTPUT_SCHEMA, _REASONING_SCHEMA]}}],
                 "description": "A string (one user message) or a list of items: messages, "
                                "function_call, function_call_output and reasoning (dropped "
                                "from the prompt)."}
InputItem = Annotated[Annotated[InputMessage, Tag("message")]
                      | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")],
                      Discriminator(_kind)]


def _input(value: Any) -> Any:
    return [{"role": "user", "content": _text(value)}] if isinstance(value, str) else value


def _schema(value: Any) -> Any:
    if value is not None and not isinstance(value, dict | bool):
        raise PydanticCustomError("invalid_type", "a JSON Schema is an object (or a boolean)")
    return value


class TextFormat(_Body):
    """`text.format` as Responses spells it (flat): mapped through chat's ResponseFormat."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, min_length=1, max_length=64,
                             pattern=r"^[A-Za-z0-9_-]+$")
    json_schema: Annotated[Any, BeforeValidator(_schema)] = Field(
        default=None, alias="schema", description="A JSON Schema (an object, or true / "
        "false); absent: any JSON value.")
    strict: bool | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _name_with_its_type(self) -> TextFormat:
        if (self.type == "json_schema") != (self.name is not None):
            raise PydanticCustomError("invalid_value", "name is required with type "
                                      "json_schema, and only there",
                                      {"param": "text.format.name"})
        if self.type != "json_schema" and self.json_schema is not None:
            raise PydanticCustomError("invalid_value", "schema goes with type json_schema "
                                      "only", {"param": "text.format.schema"})
        return self

    def to_format(self) -> OutputFormat | None:
        spec = None
        if self.type == "json_schema":
            assert self.name is not None
            spec = JsonSchemaSpec.model_validate({
                "name": self.name, "schema": self.json_schema, "strict": self.strict,
                "description": self.description})
        return ResponseFormat(type=self.type, json_schema=spec).to_format()


class TextConfig(_Body):
    format: TextFormat | None = None
    verbosity: Annotated[Refused, _refuse(("medium",), "verbosity is not supported")] = None


class ReasoningConfig(_Body):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        default=None, description="Any level but none asks the model to think (the level is "
        "not applied): its thinking section comes as a reasoning item; a model whose chat "
        "template has no thinking section answers 400 naming reasoning.effort.")
    summary: Annotated[Refused, _refuse((), "no reasoning summary is written: the "
                                        "reasoning item holds the section itself")] = None
    generate_summary: Annotated[Refused, _refuse((), "no reasoning summary is written: "
                                                 "the reasoning item holds the section "
                                                 "itself")] = None


class StreamOptions(_Body):
    include_obfuscation: bool | None = Field(default=None, description="Accepted and "
                                             "ignored (no obfuscation is added).")


class ResponsesRequest(_Body):
    """POST /v1/responses."""

    model: str | None = Field(default=None, description="A model id from /v1/models; "
                              "absent means the server's model.")
    input: Annotated[list[Annotated[InputItem, BeforeValidator(_item)]],
                     BeforeValidator(_input), WithJsonSchema(_INPUT_SCHEMA)] = Field(
        min_length=1, description="A string (one user message) or a list of items.")
    instructions: Annotated[str | None, BeforeValidator(_text)] = Field(
        default=None, description="A system message in front of the input (not carried "
                                  "on by previous_response_id).")
    max_output_tokens: int | None = Field(default=None, ge=1, description="Absent means the "
                                          "server's default, or what still fits the context.")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0,
                                      description="Absent means 1, as OpenAI; 0 is greedy.")
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1,
                             description="tokenpipe extension: seeded sampling.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    store: bool | None = Field(default=None, description="Absent means true: the answer is "
                               "kept for GET /v1/responses/{id} and previous_response_id.")
    previous_response_id: str | None = Field(default=None, description="A stored response "
                                             "whose input and output come before this input.")
    background: bool | None = Field(default=None, description="Run detached from this "
                                    "request (needs store); poll or stream it by id.")
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=16, description="Kept and echoed.")
    user: str | None = Field(default=None, max_length=256, description="Echoed.")
    truncation: Literal["disabled"] | None = Field(default=None, description='Only '
                                                   '"disabled": a prompt that does not fit is '
                                                   "a 400.")
    text: TextConfig | None = None
    parallel_tool_calls: bool | None = Field(default=None, description="true: more than one "
                                             "call per answer with tool_choice auto or required "
                                             "(absent: the server's default, false).")
    tools: Tools | None = Field(default=None, max_length=128, description="Function tools "
                                "the model may call (generated under a grammar of their "
                                "schemas).")
    tool_choice: ChoiceField = Field(default=None, description='"auto" (absent), "none", '
                                     '"required" or {"type": "function", "name"}.')
    max_tool_calls: Annotated[Refused, _refuse((), "max_tool_calls is not supported: use "
                                               "parallel_tool_calls false for one call")
                              ] = None
    include: Annotated[Refused, _refuse(([],), "include is not supported: nothing it names "
                                        "(logprobs, encrypted reasoning, tool sources) is "
                                        "produced here")] = None
    reasoning: ReasoningConfig | None = Field(default=None, description="effort: the "
                                              "model thinks (any level but none).")
    top_logprobs: Annotated[Refused, _refuse((0,), "logprobs are not supported")] = None
    prompt: Annotated[Refused, _refuse((), "prompt templates are not supported")] = None
    conversation: Annotated[Refused, _refuse((), "conversations are not supported: use "
                                             "previous_response_id")] = None
    context_management: Annotated[Refused, _refuse(([],), "context management is not "
                                                   "supported")] = None
    service_tier: Ignored = None
    prompt_cache_key: Ignored = None
    prompt_cache_retention: Ignored = None
    safety_identifier: Ignored = None

    @model_validator(mode="after")
    def _background_is_stored(self) -> ResponsesRequest:
        if self.background and self.store is False:
            raise PydanticCustomError("invalid_value", "background responses need store: "
                                      "true", {"param": "background"})
        check_tools(self.tools, self.tool_choice)
        if all(isinstance(item, ReasoningItem) for item in self.input):
            raise PydanticCustomError("invalid_value", "input holds only reasoning items, "
                                      "which are dropped from the prompt: send a message",
                                      {"param": "input"})
        return self

    @property
    def stored(self) -> bool:
        return self.store is not False

    @property
    def thinks(self) -> bool:
        """The request asks the model to think (reasoning.effort, any level but none)."""
        return self.reasoning is not None and self.reasoning.effort not in (None, "none")

    @property
    def items(self) -> bool:
        """The answer is output items (tools or reasoning), not one message's text."""
        return bool(self.tools) or self.thinks

    @property
    def format(self) -> OutputFormat | None:
        fmt = self.text.format if self.text is not None else None
        return None if fmt is None else fmt.to_format()

    def turns(self) -> tuple[Message, ...]:
        """This request's input as messages (without the instructions): function_call
        items join the assistant turn before them, outputs are `tool` turns."""
        messages: list[Message] = []
        for item in self.input:
            if isinstance(item, FunctionCallItem):
                with_calls(messages, item.call())
            elif isinstance(item, ReasoningItem):
                continue  # an earlier answer's thinking: not part of the prompt
            else:
                messages.append(item.to_message())
        return tuple(messages)

    def to_request(self, history: tuple[Message, ...] = ()) -> GenerationRequest:
        """`history` (a previous response's conversation) comes before this input."""
        messages = (*history, *self.turns())
        if self.instructions is not None:
            messages = (Message("system", self.instructions), *messages)
        params = SamplingParams(
            max_tokens=self.max_output_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            seed=None if self.seed is None else self.seed % 2**63,
            given=given(self, ("temperature", "top_p", "seed")),
        )
        return GenerationRequest(messages=messages, params=params, model=self.model,
                                 format=self.format,
                                 tools=tuple(t.to_tool() for t in self.tools or ()),
                                 tool_choice=tool_choice_of(self.tool_choice,
                                                            self.parallel_tool_calls),
                                 split_reasoning=self.thinks, think=self.thinks)
