"""Tool calls: how they are written, prompted and enforced.

The model writes a call as the Hermes/Qwen convention has it (what most open models with
tools were trained on), always with exactly this spacing:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

The grammar (`tools_grammar`) admits either a text answer that never contains `<tool_call>`
or one or more such calls, each with the name of an offered function and arguments valid
for its schema; so a call is well-formed by construction, and text.ToolCallSplitter reads
the calls back from the stream with no guessing. `chat_messages` gives the chat template
the tools and the history as it takes them: a template that knows `tools` gets them in
OpenAI's shape, any other gets them in a generic system section
(docs/structured-output.md)."""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any

from ..errors import BadRequest
from ..text import ToolCallSplitter
from ..types import GenerationRequest, Message, OutputFormat, Tool, ToolCall, ToolChoice
from .grammars import WHITESPACE, enforced_schema

OPEN = "<tool_call>\n"
HEAD = '{"name": "'
MID = '", "arguments": '
CLOSE = "}\n</tool_call>"
BETWEEN = "\n"  # between two calls


def new_call_id() -> str:
    """A call's id, as OpenAI's look (`call_` and 24 letters and digits)."""
    return "call_" + secrets.token_hex(12)


def tool_call_splitter() -> ToolCallSplitter:
    """A splitter for answers written in this format."""
    return ToolCallSplitter(OPEN, HEAD, MID, CLOSE, BETWEEN, new_call_id)


def call_text(call: ToolCall) -> str:
    """A call as the model writes it (an assistant turn of the history, rendered)."""
    return f"{OPEN}{HEAD}{call.name}{MID}{call.arguments}{CLOSE}"


def tools_grammar(request: GenerationRequest, param: str = "tools") -> str:
    """The grammar (llguidance's) of an answer to a request with tools."""
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_lark(tools_lark(request, param)))


def tools_lark(request: GenerationRequest, param: str = "tools") -> str:
    """The Lark text (llguidance's dialect) of that grammar, its rule `start` first."""
    choice = request.tool_choice
    tools = request.tools
    if choice.mode == "function":
        tools = tuple(t for t in tools if t.name == choice.name)
        if not tools:
            raise BadRequest(f"tool_choice names {choice.name!r}, which is not among the "
                             "tools", param="tool_choice")
    rules = [f"call: {' | '.join(f'call_{i}' for i in range(len(tools)))}"]
    for i, tool in enumerate(tools):
        schema = _arguments_schema(tool, param)
        head = json.dumps(f"{OPEN}{HEAD}{tool.name}{MID}")
        rules.append(f"call_{i}: {head} args_{i} {json.dumps(CLOSE)}")
        rules.append(f"args_{i}: %json {schema}")
    calls = f'call ({json.dumps(BETWEEN)} call)*' if several_calls(choice) else "call"
    text = text_rule(request.format)
    if choice.mode == "none":
        start = "start: answer"
    elif choice.mode == "auto":
        start = "start: answer | calls"
    else:  # required, or one named function
        start = "start: calls"
    return "\n".join([start, f"calls: {calls}", *rules, text])


def resolved_choice(choice: ToolChoice, parallel_default: bool) -> ToolChoice:
    """`choice` with `parallel` decided: a named function is one call; `required` is one call
    unless the client asked for more; `auto` takes the server's default where the client
    said nothing (as llama-server's parallel_tool_calls, false unless set)."""
    if choice.mode == "function":
        parallel = False
    elif choice.mode == "required":
        parallel = choice.parallel is True
    else:
        parallel = parallel_default if choice.parallel is None else choice.parallel
    return choice if parallel is choice.parallel else dataclasses.replace(choice,
                                                                          parallel=parallel)


def several_calls(choice: ToolChoice) -> bool:
    """Whether an answer may hold more than one call (a named function: never)."""
    return choice.parallel is True and choice.mode != "function"


def text_rule(fmt: OutputFormat | None) -> str:
    """The answer other than calls: JSON under the format, or any text without the tag."""
    if fmt is None:
        return ("answer: TEXT\n"
                f"TEXT: /(?s:.*)/ & ~/(?s:.*){OPEN.strip()}(?s:.*)/")
    schema = '{"type": "object"}' if fmt.kind == "json_object" else (fmt.schema or "{}")
    return f"answer: %json {_with_whitespace(json.loads(schema), 'response_format')}"


def _arguments_schema(tool: Tool, param: str) -> str:
    try:
        schema = json.loads(tool.parameters)
    except (ValueError, RecursionError):
        raise BadRequest(f"the parameters of {tool.name!r} are not JSON", param=param) from None
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise BadRequest(f"the parameters of {tool.name!r} must be a JSON Schema of an "
                         'object ("type": "object")', param=param)
    return _with_whitespace({"type": "object", **schema}, param)


def _with_whitespace(schema: Any, param: str) -> str:
    if not isinstance(schema, dict):
        schema = {} if schema is True else {"not": {}}
    return json.dumps({**enforced_schema(schema, param),
                       "x-guidance": {"whitespace_pattern": WHITESPACE}}, ensure_ascii=False)


# ---- the prompt -------------------------------------------------------------------------
GENERIC_INSTRUCTIONS = (
    "You can call functions. To call one, reply with nothing but\n"
    f"{OPEN}{HEAD}<function name>{MID}<arguments as a JSON object>{CLOSE}\n"
    "(one such block per call). A function's result comes back in a <tool_response> "
    "block. The functions:")


def template_takes_tools(template: str | None) -> bool:
    """Whether a Jinja chat template reads a `tools` variable (then it lays them out)."""
    if not template:
        return False
    import jinja2
    import jinja2.meta

    try:
        ast = jinja2.Environment().parse(template)
    except jinja2.TemplateError:
        return False
    return "tools" in jinja2.meta.find_undeclared_variables(ast)


def openai_tool(tool: Tool) -> dict[str, Any]:
    """A tool in OpenAI's shape, as templates that take `tools` expect it."""
    function: dict[str, Any] = {"name": tool.name, "parameters": json.loads(tool.parameters)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def chat_messages(request: GenerationRequest, template_takes_tools: bool
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages as a chat template reads them, and the tools to pass it (None: the
    tools, if any, are already written into the messages)."""
    assert request.messages is not None
    if template_takes_tools:
        return [_native(m) for m in request.messages], (
            [openai_tool(t) for t in request.tools] if request.tools else None)
    messages = [_generic(m) for m in request.messages]
    if request.tools:
        listing = "\n".join(json.dumps(openai_tool(t), ensure_ascii=False)
                            for t in request.tools)
        section = f"{GENERIC_INSTRUCTIONS}\n{listing}"
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system",
                           "content": f"{messages[0]['content']}\n\n{section}"}
        else:
            messages.insert(0, {"role": "system", "content": section})
    return messages, None


def _native(m: Message) -> dict[str, Any]:
    """OpenAI's shape, which templates with tools (Qwen, Llama, Mistral, Hermes) read."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": _arguments(c.arguments)}} for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)  # templates index arguments as a mapping
    except ValueError:
        return text


def _generic(m: Message) -> dict[str, str]:
    """Plain role/content turns: calls written as the model writes them, results as a
    user turn in a <tool_response> block."""
    if m.role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"}
    if m.tool_calls:
        calls = BETWEEN.join(call_text(c) for c in m.tool_calls)
        return {"role": m.role, "content": f"{m.content}\n{calls}" if m.content else calls}
    return {"role": m.role, "content": m.content}
