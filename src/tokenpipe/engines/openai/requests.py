"""The openai engine's upstream requests, without I/O: a prepared request as the JSON body
of an OpenAI-compatible `/v1/chat/completions` or `/v1/completions` (vLLM's extra
sampling parameters only where they change something), and its bytes for one upstream."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...constrain.tools import openai_tool
from ...types import Message, OutputFormat, ToolChoice
from ..base import PreparedRequest

if TYPE_CHECKING:  # only a type here
    from .replicas import Replica


def body_of(prepared: PreparedRequest, model: str | None, *, going_on: bool = False
            ) -> tuple[str, dict[str, Any]]:
    """The upstream request; `going_on`: a continuation, whose last assistant message
    the upstream continues (vLLM's two flags; llama-server and tokenpipe continue a
    last assistant message anyway), or a raw prompt of token ids. Sent with vLLM's
    `return_token_ids` (encoded): an answer that moves goes on from its ids."""
    request, p = prepared.request, prepared.request.params
    body: dict[str, Any] = {"model": model}
    if request.messages is not None:
        path = "/v1/chat/completions"
        body["messages"] = [upstream_message(m) for m in request.messages]
        if going_on:
            body.update(continue_final_message=True, add_generation_prompt=False)
    else:
        path = "/v1/completions"
        body["prompt"] = (request.prompt if request.prompt_ids is None
                          else list(request.prompt_ids))
    body.update(stream=True, stream_options={"include_usage": True},
                max_tokens=prepared.max_tokens, temperature=p.temperature, top_p=p.top_p)
    optional = {"seed": p.seed, "stop": list(p.stop) or None,
                "presence_penalty": p.presence_penalty or None,
                "frequency_penalty": p.frequency_penalty or None,
                # vLLM's extra sampling parameters, sent only when they change something
                "top_k": p.top_k if p.top_k > 0 else None,
                "min_p": p.min_p or None,
                "repetition_penalty": None if p.repetition_penalty == 1.0
                else p.repetition_penalty}
    body.update((k, v) for k, v in optional.items() if v is not None)
    if request.format is not None:
        body["response_format"] = response_format(request.format)
    if request.tools:
        body["tools"] = [openai_tool(t) for t in request.tools]
        body["tool_choice"] = tool_choice(request.tool_choice)
        body["parallel_tool_calls"] = request.tool_choice.parallel
    return path, body


def encoded(body: dict[str, Any], replica: Replica) -> bytes:
    """The body as sent to `replica`: asking for the token ids unless it refused them."""
    if not replica.refuses_token_ids:
        body = {**body, "return_token_ids": True}
    return json.dumps(body, ensure_ascii=False).encode()


def upstream_message(m: Message) -> dict[str, Any]:
    """A chat turn in OpenAI's shape: an assistant turn's calls, a tool turn's call id."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["content"] = m.content or None  # OpenAI's assistant turn of calls alone
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if choice.mode == "function":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def response_format(fmt: OutputFormat) -> dict[str, Any]:
    """An OutputFormat as OpenAI's `response_format`, for the upstream."""
    if fmt.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name or "answer",
                            "schema": json.loads(fmt.schema or "{}")}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}
