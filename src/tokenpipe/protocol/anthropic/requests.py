"""Anthropic Messages request bodies (docs/protocol.md, "Anthropic Messages HTTP"):

- `messages`: `user` / `assistant` turns in the order given, `content` a string or a list
  of blocks (blocks.py: text, tool_use, tool_result, thinking); any other block type
  (image, document, ...) is a 400 naming the field. A last `assistant` message of text is
  a prefill: the answer continues it (engines/prefill.py) and holds only what follows;
  with tools, `thinking` or `output_config` it is a 400 (their grammar or thinking section
  would start inside an answer already begun).
- `system`: a string or `text` blocks. `max_tokens` is required, as Anthropic requires it;
  `model` may be absent (the server's model), as on the OpenAI door.
- Sampling: `temperature` (absent: 1, as Anthropic), `top_p`, `top_k`, `stop_sequences`.
- `tools` (custom tools: name, description, input_schema) and `tool_choice` (auto, any,
  tool, none; disable_parallel_tool_use) map to the core's tools, generated under a
  grammar; `thinking` enabled or adaptive asks the model to think (a model whose chat
  template has no thinking section refuses it) and splits the section off the answer, and
  enabled's `budget_tokens` (below max_tokens) bounds it: constrain/thinking.py.
- `output_config.format` (`{"type": "json_schema", "schema"}`): the answer's text is JSON
  valid against the schema, generated under it (as chat's response_format).
- Accepted and ignored (they do not change the answer): `metadata`, `service_tier`,
  `cache_control` (also on blocks), `speed`, `inference_geo`, `diagnostics`,
  `user_profile_id`, `workspace_id`. Neutral values of what is not supported pass
  (`output_config.effort: null`, `mcp_servers: []`); anything else is refused.
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
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ...constrain.grammars import schema_text
from ...sampling_defaults import given
from ...types import GenerationRequest, Message, OutputFormat, SamplingParams, Tool, ToolChoice
from ..common import check_text
from ..common import neutral_only as _refuse
from ..formats import ToolName
from .blocks import ASSISTANT_ONLY, parse_content, text_of, turns

MAX_STOP = 16  # as the OpenAI door: the core's stop matcher checks each one per piece
MAX_TOOLS = 128


def _flatten(value: Any) -> Any:
    """System text: a string, or text blocks joined with newlines (their order kept)."""
    if isinstance(value, str):
        return check_text(value)
    if isinstance(value, list):
        return "\n".join(text_of(block, str(i)) for i, block in enumerate(value))
    return value  # not text: the str field refuses it with pydantic's own words


_CACHE = {"type": ["object", "null"], "description": "Accepted and ignored."}
_TEXT_BLOCK = {"type": "object", "required": ["type", "text"], "additionalProperties": False,
               "properties": {"type": {"const": "text"}, "text": {"type": "string"},
                              "cache_control": _CACHE,
                              "citations": {"type": ["array", "null"], "maxItems": 0}}}
_SYSTEM_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}],
                  "description": "Text, or a list of `text` blocks (joined with newlines)."}
_TOOL_USE = {
    "type": "object", "required": ["type", "id", "name", "input"],
    "additionalProperties": False, "description": "A call the assistant made.",
    "properties": {"type": {"const": "tool_use"}, "id": {"type": "string", "minLength": 1},
                   "name": {"type": "string", "minLength": 1}, "input": {"type": "object"},
                   "cache_control": _CACHE, "caller": {}, "toolset_name": {}}}
_TOOL_RESULT = {
    "type": "object", "required": ["type", "tool_use_id"], "additionalProperties": False,
    "description": "The result of a call of the previous assistant message.",
    "properties": {"type": {"const": "tool_result"},
                   "tool_use_id": {"type": "string", "minLength": 1},
                   "content": {"anyOf": [{"type": "string"},
                                         {"type": "array", "items": _TEXT_BLOCK}]},
                   "is_error": {"type": ["boolean", "null"]}, "cache_control": _CACHE,
                   "toolset_name": {}}}
_THINKING = [
    {"type": "object", "required": ["type", "thinking"], "additionalProperties": False,
     "description": "Dropped from the prompt.",
     "properties": {"type": {"const": "thinking"}, "thinking": {"type": "string"},
                    "signature": {"type": "string"}}},
    {"type": "object", "required": ["type", "data"], "additionalProperties": False,
     "description": "Dropped from the prompt.",
     "properties": {"type": {"const": "redacted_thinking"}, "data": {"type": "string"}}},
]


def _content(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": list(blocks)}}]}


# What _blocks_of_its_role checks, for /docs and the schema-driven tests
_ROLE_RULES: JsonDict = {"allOf": [
    {"if": {"properties": {"role": {"const": "user"}}, "required": ["role"]},
     "then": {"properties": {"content": _content(_TEXT_BLOCK, _TOOL_RESULT)}}},
    {"if": {"properties": {"role": {"const": "assistant"}}, "required": ["role"]},
     "then": {"properties": {"content": _content(_TEXT_BLOCK, _TOOL_USE, *_THINKING)}}},
]}
_CONTENT_SCHEMA = {**_content(_TEXT_BLOCK, _TOOL_USE, _TOOL_RESULT, *_THINKING),
                   "description": "Text, or a list of blocks: text, tool_use (assistant), "
                                  "tool_result (user), thinking (assistant, dropped)."}
Content = Annotated[tuple[Any, ...], BeforeValidator(parse_content),
                    WithJsonSchema(_CONTENT_SCHEMA)]
# Optional as one nullable field: an error names `system`, not a branch of a union
OptionalContent = Annotated[str | None, BeforeValidator(_flatten), WithJsonSchema(
    {**_SYSTEM_SCHEMA, "anyOf": [*_SYSTEM_SCHEMA["anyOf"], {"type": "null"}]})]


Refused = SkipJsonSchema[Any]  # hidden from the schema: they exist only to be refused
Ignored = SkipJsonSchema[Any]  # accepted whatever they hold, and ignored


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class InputMessage(_Body):
    model_config = ConfigDict(json_schema_extra=_ROLE_RULES)

    role: Literal["user", "assistant"]
    content: Content

    @model_validator(mode="after")
    def _blocks_of_its_role(self) -> InputMessage:
        for i, block in enumerate(self.content):
            wrong = (block.type in ASSISTANT_ONLY) != (self.role == "assistant")
            if wrong and block.type != "text":
                owner = "assistant" if block.type in ASSISTANT_ONLY else "user"
                raise PydanticCustomError(
                    "invalid_value", "{kind} blocks are only in {owner} messages",
                    {"at": f"content.{i}.type", "kind": block.type, "owner": owner})
        return self

    def to_messages(self) -> list[Message]:
        return turns(self.role, self.content)


def _custom_type(value: Any) -> Any:
    if value not in (None, "custom"):
        raise PydanticCustomError("unsupported_value", "server tools (type '{kind}') are not "
                                  "supported: only custom tools, with an input_schema",
                                  {"kind": str(value)})
    return value


class ToolDefinition(_Body):
    """A custom tool: its input is generated under `input_schema`."""

    # first: a server tool is refused for what it is, before its missing input_schema
    type: Annotated[Literal["custom"] | None, BeforeValidator(_custom_type)] = None
    name: ToolName
    description: str | None = None
    input_schema: dict[str, Any] = Field(description="A JSON Schema object: each call's "
                                         "input is generated under it.")
    strict: bool | None = Field(default=None, description="Accepted; the schema is always "
                                "enforced, as with strict true.")
    cache_control: Ignored = Field(default=None, description="Accepted and ignored.")
    input_examples: Ignored = Field(default=None, description="Accepted and ignored.")
    eager_input_streaming: bool | None = Field(default=None, description="Accepted; input "
                                               "always streams as it is generated.")

    def to_tool(self) -> Tool:
        return Tool(self.name, self.description, schema_text(self.input_schema))


class ToolChoiceSpec(_Body):
    model_config = ConfigDict(json_schema_extra={  # what _name_with_tool checks
        "if": {"properties": {"type": {"const": "tool"}}, "required": ["type"]},
        "then": {"required": ["name"], "properties": {"name": {"type": "string"}}},
        "else": {"properties": {"name": {"type": "null"}}}})

    type: Literal["auto", "any", "tool", "none"] = Field(
        description="auto: text or calls; any: at least one call; tool: calls of `name`; "
                    "none: text only.")
    name: ToolName | None = None
    disable_parallel_tool_use: bool | None = Field(default=None, description="true: at "
                                                   "most one call.")

    @model_validator(mode="after")
    def _name_with_tool(self) -> ToolChoiceSpec:
        if (self.type == "tool") != (self.name is not None):
            raise PydanticCustomError("invalid_value", "name is required with type tool, "
                                      "and only there", {"at": "name"})
        return self

    def to_choice(self) -> ToolChoice:
        mode = {"auto": "auto", "any": "required", "tool": "function", "none": "none"}
        return ToolChoice(mode[self.type], self.name,  # type: ignore[arg-type]
                          None if self.disable_parallel_tool_use is None
                          else not self.disable_parallel_tool_use)


class ThinkingConfig(_Body):
    type: Literal["enabled", "disabled", "adaptive"] = Field(
        description="enabled or adaptive: the model thinks, its thinking section as a "
                    "thinking block (a model that cannot think: 400 naming thinking); "
                    "disabled: a section it writes stays in the text, as written.")
    budget_tokens: int | None = Field(default=None, ge=1, description="With enabled: "
                                      "at most this many tokens of thinking, then the "
                                      "section is closed and the answer starts (applied "
                                      "when below max_tokens). Anthropic requires it with "
                                      "enabled, this server does not.")


class JsonOutputFormat(_Body):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema", description="The JSON Schema the "
                                        "answer's text is valid against.")


class OutputConfig(_Body):
    format: JsonOutputFormat | None = Field(default=None, description="JSON output, "
                                            "generated under the schema.")
    effort: Annotated[Refused, _refuse((), "output_config.effort is not supported: this "
                                       "server has no effort levels")] = None


class _Prompt(_Body):
    """What /v1/messages and /v1/messages/count_tokens share: the conversation."""

    model_config = ConfigDict(json_schema_extra={  # a part of what _tools_and_results checks
        "if": {"properties": {"tool_choice": {"type": "object", "required": ["type"],
                                              "properties": {"type": {"enum": ["any",
                                                                               "tool"]}}}},
               "required": ["tool_choice"]},
        "then": {"required": ["tools"], "properties": {"tools": {"type": "array",
                                                                 "minItems": 1}}}})

    model: str | None = Field(default=None, description="A model id from /v1/models; "
                              "absent means the server's model (Anthropic requires it).")
    messages: list[InputMessage] = Field(min_length=1)
    system: OptionalContent = None
    tools: list[ToolDefinition] | None = Field(
        default=None, max_length=MAX_TOOLS, description="Custom tools the model may call: "
        "each call's input is generated under the tool's input_schema.")
    tool_choice: ToolChoiceSpec | None = Field(default=None, description="Absent: auto.")
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    cache_control: Ignored = Field(default=None, description="Accepted and ignored.")
    speed: Ignored = None
    inference_geo: Ignored = None
    diagnostics: Ignored = None
    user_profile_id: Ignored = None
    workspace_id: Ignored = None

    @model_validator(mode="after")
    def _prefill(self) -> _Prompt:
        last = self.messages[-1]
        if last.role != "assistant":
            return self
        at = {"at": f"messages.{len(self.messages) - 1}"}
        if any(block.type != "text" for block in last.content):
            raise PydanticCustomError(
                "unsupported_value", "a prefill (a last assistant message) may hold text "
                "blocks only", at)
        if self.tools or self.thinking is not None or self.output_config is not None:
            raise PydanticCustomError(
                "unsupported_value", "assistant message prefill is not supported together "
                "with tools, thinking or output_config: end the conversation with a user "
                "message", at)
        return self

    @model_validator(mode="after")
    def _tools_and_results(self) -> _Prompt:
        names = [t.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise PydanticCustomError("invalid_value", "two tools have the same name",
                                      {"at": "tools"})
        choice = self.tool_choice
        if choice is not None and choice.type in ("any", "tool") and not names:
            raise PydanticCustomError("invalid_value", "tool_choice {kind} needs tools",
                                      {"at": "tool_choice", "kind": choice.type})
        if choice is not None and choice.name is not None and choice.name not in names:
            raise PydanticCustomError("invalid_value", "tool_choice names '{name}', which "
                                      "is not among the tools",
                                      {"at": "tool_choice.name", "name": choice.name})
        called: set[str] = set()  # the calls of the previous assistant turn
        for n, message in enumerate(self.messages):
            for i, block in enumerate(message.content):
                if block.type == "tool_result" and block.id not in called:
                    raise PydanticCustomError(
                        "invalid_value", "unexpected tool_use_id '{id}' in a tool_result "
                        "block: each tool_result answers a tool_use block of the previous "
                        "message", {"at": f"messages.{n}.content.{i}.tool_use_id",
                                    "id": block.id})
            called = {b.id for b in message.content if b.type == "tool_use"}
        return self

    def _messages(self) -> tuple[Message, ...]:
        turns = tuple(t for m in self.messages for t in m.to_messages())
        if self.system is None:
            return turns
        return (Message("system", self.system), *turns)

    def _request(self, params: SamplingParams) -> GenerationRequest:
        choice = self.tool_choice.to_choice() if self.tool_choice else ToolChoice()
        thinking = self.thinking
        asked = thinking is not None and thinking.type != "disabled"
        budget = thinking.budget_tokens if thinking is not None and (
            thinking.type == "enabled") else None
        if budget is not None and (params.max_tokens is None or budget >= params.max_tokens):
            budget = None  # max_tokens ends the answer first (or nothing is generated)
        fmt = self.output_config.format if self.output_config is not None else None
        return GenerationRequest(
            messages=self._messages(), params=params, model=self.model,
            tools=tuple(t.to_tool() for t in self.tools or ()), tool_choice=choice,
            split_reasoning=asked, think=asked, reasoning_budget=budget,
            format=None if fmt is None else OutputFormat("json_schema",
                                                         schema_text(fmt.json_schema)))


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
            given=given(self, {"temperature": "temperature", "top_p": "top_p",
                               "top_k": "top_k", "stop_sequences": "stop"}),
        )
        return self._request(params)


class CountTokensRequest(_Prompt):
    """POST /v1/messages/count_tokens: the prompt only, counted as a generation counts it."""

    def to_request(self) -> GenerationRequest:
        return self._request(SamplingParams())
