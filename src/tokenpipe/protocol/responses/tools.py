"""Function tools on the Responses API (docs/protocol.md, "OpenAI Responses HTTP"):

- `tools: [{"type": "function", "name", "description", "parameters", "strict"}]` (flat,
  unlike chat's `{"type": "function", "function": {...}}`); other tool types (web search,
  file search, MCP, ...) are a 400 naming `tools`.
- `tool_choice`: `"auto"`, `"none"`, `"required"` or `{"type": "function", "name"}`;
  one call unless `parallel_tool_calls: true` (constrain/tools.py).
- Input items `{"type": "function_call", "call_id", "name", "arguments"}` (a call the model
  made, as its output listed it) and `{"type": "function_call_output", "call_id",
  "output"}` (its result): the history's assistant calls and `tool` turns.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ...constrain.grammars import schema_text
from ...types import Message, Tool, ToolCall, ToolChoice
from ..formats import ToolName


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _function_tool(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("type"), str) and (
            value["type"] != "function"):
        raise PydanticCustomError(
            "unsupported_value", "tools of type '{kind}' are not supported: only function "
            "tools", {"kind": value["type"]})
    return value


class FunctionTool(_Body):
    type: Literal["function"]
    name: ToolName
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema object; absent: no parameters.")
    strict: bool | None = Field(default=None, description="Accepted; the schema is always "
                                "enforced, as with strict true.")

    def to_tool(self) -> Tool:
        params = self.parameters if self.parameters is not None else {
            "type": "object", "properties": {}}
        return Tool(self.name, self.description, schema_text(params))

    def echo(self) -> dict[str, Any]:
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters, "strict": self.strict}


Tools = list[Annotated[FunctionTool, BeforeValidator(_function_tool)]]


class NamedFunction(_Body):
    type: Literal["function"]
    name: ToolName


ChoiceField = Literal["none", "auto", "required"] | NamedFunction | None


def tool_choice_of(choice: ChoiceField, parallel: bool | None) -> ToolChoice:
    if isinstance(choice, NamedFunction):
        return ToolChoice("function", choice.name, parallel)
    return ToolChoice(choice or "auto", None, parallel)


def check_tools(tools: list[FunctionTool] | None, choice: ChoiceField) -> None:
    """Tools named once each; a tool_choice that calls for tools has them."""
    names = [t.name for t in tools or ()]
    if len(set(names)) != len(names):
        raise PydanticCustomError("invalid_value", "two tools have the same name",
                                  {"param": "tools"})
    if choice is not None and choice not in ("none", "auto"):
        if not names:
            raise PydanticCustomError("invalid_value", "tool_choice needs tools",
                                      {"param": "tool_choice"})
        if isinstance(choice, NamedFunction) and choice.name not in names:
            raise PydanticCustomError("invalid_value", "tool_choice names '{name}', which "
                                      "is not among the tools",
                                      {"param": "tool_choice", "name": choice.name})


class FunctionCallItem(_Body):
    """A call the model made, sent back as input (as the response's output listed it)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: ToolName
    arguments: str = Field(description="The arguments as JSON text.")
    id: str | None = Field(default=None, max_length=256, description="Kept as the item's id.")
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def call(self) -> ToolCall:
        return ToolCall(self.call_id, self.name, self.arguments)

    def item(self) -> dict[str, Any]:
        return {"id": self.id or "fc_" + secrets.token_hex(24), "type": "function_call",
                "call_id": self.call_id, "name": self.name, "arguments": self.arguments,
                "status": "completed"}


class OutputText(_Body):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None


def _output(value: Any) -> Any:
    return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


class FunctionCallOutputItem(_Body):
    """A call's result: `output` a string (or text parts, joined with newlines)."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=256)
    output: Annotated[list[OutputText], BeforeValidator(_output)]
    id: str | None = Field(default=None, max_length=256, description="Kept as the item's id.")
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    @property
    def text(self) -> str:
        return "\n".join(part.text for part in self.output)

    def to_message(self) -> Message:
        return Message("tool", self.text, tool_call_id=self.call_id)

    def item(self) -> dict[str, Any]:
        return {"id": self.id or "fco_" + secrets.token_hex(24),
                "type": "function_call_output", "call_id": self.call_id,
                "output": self.text, "status": "completed"}


def with_calls(messages: list[Message], call: ToolCall) -> None:
    """A function_call item joins the assistant turn just before it (a message, or the
    calls before it), else opens an assistant turn of its own."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":
        messages[-1] = Message("assistant", last.content, (*last.tool_calls, call))
    else:
        messages.append(Message("assistant", "", (call,)))


def check_outputs(messages: tuple[Message, ...]) -> str | None:
    """The call_id of the first function_call_output that answers no call made before it
    (in this input or the conversation it continues), else None."""
    made: set[str] = set()
    for m in messages:
        made.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in made:
            return m.tool_call_id
    return None
