"""What an answer may be, in OpenAI's shapes, which every door that takes them accepts
(OpenAI chat and completions, tokenpipe.v1 `params`): `response_format` (`{"type":
"text"}`, `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {"name",
"schema", "strict", "description"}}`), `tools` (functions with JSON-schema parameters),
`tool_choice`, and the tool calls of an assistant turn in the history."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..constrain.grammars import schema_text
from ..types import OutputFormat, Tool, ToolChoice


def _schema(value: Any) -> Any:
    if value is not None and not isinstance(value, dict | bool):
        raise PydanticCustomError("invalid_type", "a JSON Schema is an object (or a boolean)")
    return value


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    json_schema: Annotated[Any, BeforeValidator(_schema)] = Field(
        default=None, alias="schema", description="A JSON Schema (an object, or true / "
        "false); absent: any JSON value.")
    strict: bool | None = Field(default=None, description="Accepted; the schema is always "
                                "enforced, as with strict true.")
    description: str | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise PydanticCustomError(
                "invalid_value", "json_schema is required with type json_schema, and only "
                "there", {"param": "response_format.json_schema"})
        return self

    def to_format(self) -> OutputFormat | None:
        if self.type == "text":
            return None
        if self.type == "json_object":
            return OutputFormat("json_object")
        spec = self.json_schema
        assert spec is not None
        schema = {} if spec.json_schema is None else spec.json_schema
        return OutputFormat("json_schema", schema_text(schema), spec.name, spec.strict)


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class CalledFunction(_Shape):
    name: ToolName
    arguments: str = Field(description="The arguments the assistant wrote, as JSON text.")


class MessageToolCall(_Shape):
    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"]
    function: CalledFunction


class FunctionSpec(_Shape):
    name: ToolName
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema object; absent: no parameters.")
    strict: bool | None = Field(default=None, description="Accepted; the schema is always "
                                "enforced, as with strict true.")


class ToolSpec(_Shape):
    type: Literal["function"]
    function: FunctionSpec

    def to_tool(self) -> Tool:
        f = self.function
        params = f.parameters if f.parameters is not None else {"type": "object",
                                                                "properties": {}}
        return Tool(f.name, f.description, schema_text(params))


class NamedFunction(_Shape):
    name: ToolName


class NamedToolChoice(_Shape):
    type: Literal["function"]
    function: NamedFunction


ToolChoiceField = Literal["none", "auto", "required"] | NamedToolChoice | None


def tool_choice_of(choice: ToolChoiceField, parallel: bool | None) -> ToolChoice:
    """tool_choice and parallel_tool_calls as the core's ToolChoice (absent: auto)."""
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("function", choice.function.name, parallel)
    return ToolChoice(choice or "auto", None, parallel)


def check_tools(tools: list[ToolSpec] | None, choice: ToolChoiceField) -> None:
    """Tools named once each; a tool_choice that calls for tools has some."""
    names = [t.function.name for t in tools or ()]
    if len(set(names)) != len(names):
        raise PydanticCustomError("invalid_value", "two tools have the same name",
                                  {"param": "tools"})
    if not names and choice is not None and choice not in ("none", "auto"):
        raise PydanticCustomError("invalid_value", "tool_choice needs tools",
                                  {"param": "tool_choice"})
