"""Session events and requests as JSON, for a log another process replays (the Redis
resume store): `encode(event) -> str`, `decode(str) -> event`, each event type its own
short tag; `encode_request` / `decode_request` for the request a replica taking a stream
over runs again. What a reader of the log sees is what a reader of the session saw: the
same seq for the same text, channel, call and logprobs, the same final event. JSON, never
pickle: whoever can write to Redis must not be able to run code in a replica."""

from __future__ import annotations

import json
from typing import Any

from ...errors import TokenpipeError
from ...types import (
    Delta,
    Event,
    Failed,
    Finished,
    FinishReason,
    GenerationRequest,
    Message,
    OutputFormat,
    Progress,
    Queued,
    SamplingParams,
    Started,
    Timing,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolChoice,
    Usage,
)


def encode(event: Event) -> str:
    return json.dumps(_plain(event), ensure_ascii=False, separators=(",", ":"))


def decode(text: str | bytes) -> Event:
    data = json.loads(text)
    kind = data["t"]
    if kind == "d":
        return Delta(data["s"], data["x"], data.get("c", "content"), data.get("i", 0),
                     data.get("id"), data.get("n"),
                     tuple(_logprob(p) for p in data.get("lp", ())), tuple(data.get("ti", ())))
    if kind == "s":
        return Started(data["m"], data["p"], data["k"])
    if kind == "f":
        return Finished(FinishReason(data["r"]), Usage(*data["u"]), Timing(*data["tm"]),
                        data.get("ss"))
    if kind == "e":
        return Failed(_error(data["code"], data["msg"], data.get("param")), Usage(*data["u"]))
    if kind == "p":
        return Progress(data["d"], data["n"])
    if kind == "q":
        return Queued(data["p"], data["l"])
    raise ValueError(f"not a session event: {kind!r}")


def _plain(event: Event) -> dict[str, Any]:
    if isinstance(event, Delta):
        out: dict[str, Any] = {"t": "d", "s": event.seq, "x": event.text}
        if event.channel != "content":
            out["c"] = event.channel
        if event.index:
            out["i"] = event.index
        if event.call_id is not None:
            out["id"] = event.call_id
        if event.name is not None:
            out["n"] = event.name
        if event.logprobs:
            out["lp"] = [[p.token, p.logprob, p.data.hex(),
                          [[t, lp, b.hex()] for t, lp, b in p.top], p.offset]
                         for p in event.logprobs]
        if event.token_ids:
            out["ti"] = event.token_ids
        return out
    if isinstance(event, Started):
        return {"t": "s", "m": event.model, "p": event.prompt_tokens, "k": event.stream}
    if isinstance(event, Finished):
        return {"t": "f", "r": event.reason.value, "u": _usage(event.usage),
                "tm": [event.timing.queue_ms, event.timing.ttft_ms, event.timing.total_ms,
                       event.timing.tokens_per_s], "ss": event.stop_sequence}
    if isinstance(event, Failed):
        return {"t": "e", "code": event.error.code, "msg": event.error.message,
                "param": event.error.param, "u": _usage(event.usage)}
    if isinstance(event, Progress):
        return {"t": "p", "d": event.done, "n": event.total}
    return {"t": "q", "p": event.position, "l": event.loading}


def _usage(usage: Usage) -> list[int]:
    return [usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
            usage.reasoning_tokens, usage.drafted_tokens, usage.accepted_tokens]


def _logprob(data: list[Any]) -> TokenLogprob:
    token, logprob, raw, top, offset = data
    return TokenLogprob(token, logprob, bytes.fromhex(raw),
                        tuple((t, lp, bytes.fromhex(b)) for t, lp, b in top), offset)


def _error(code: str, message: str, param: str | None) -> TokenpipeError:
    """The error class of that code (its HTTP status and shape in every door), else a
    TokenpipeError carrying the code."""
    cls = _ERROR_CLASSES().get(code)
    if cls is not None:
        return cls(message, param=param)
    error = TokenpipeError(message, param=param)
    error.code = code
    return error


def _ERROR_CLASSES() -> dict[str, type[TokenpipeError]]:  # a table
    out: dict[str, type[TokenpipeError]] = {}
    todo: list[type[TokenpipeError]] = [TokenpipeError]
    while todo:
        cls = todo.pop(0)
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


def encode_request(request: GenerationRequest) -> str:
    p = request.params
    data: dict[str, Any] = {
        "params": {"max_tokens": p.max_tokens, "temperature": p.temperature,
                   "top_p": p.top_p, "top_k": p.top_k, "min_p": p.min_p,
                   "repetition_penalty": p.repetition_penalty,
                   "presence_penalty": p.presence_penalty,
                   "frequency_penalty": p.frequency_penalty, "seed": p.seed,
                   "stop": list(p.stop), "logprobs": p.logprobs, "given": sorted(p.given)},
        "model": request.model, "prompt": request.prompt,
        "tools": [[t.name, t.description, t.parameters] for t in request.tools],
        "tool_choice": [request.tool_choice.mode, request.tool_choice.name,
                        request.tool_choice.parallel],
        "split_reasoning": request.split_reasoning,
        "reasoning_budget": request.reasoning_budget, "think": request.think,
        "token_ids": request.token_ids,
    }
    if request.prompt_ids is not None:
        data["prompt_ids"] = request.prompt_ids
    if request.messages is not None:
        data["messages"] = [[m.role, m.content, [[c.id, c.name, c.arguments]
                                                 for c in m.tool_calls], m.tool_call_id]
                            for m in request.messages]
    f = request.format
    if f is not None:
        data["format"] = [f.kind, f.schema, f.name, f.strict]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode_request(text: str | bytes) -> GenerationRequest:
    data = json.loads(text)
    p = data["params"]
    params = SamplingParams(**{**p, "stop": tuple(p["stop"]), "given": frozenset(p["given"])})
    messages = None
    if "messages" in data:
        messages = tuple(Message(role, content, tuple(ToolCall(*c) for c in calls), call_id)
                         for role, content, calls, call_id in data["messages"])
    mode, name, parallel = data["tool_choice"]
    return GenerationRequest(
        messages=messages, prompt=data["prompt"], params=params, model=data["model"],
        format=OutputFormat(*data["format"]) if "format" in data else None,
        tools=tuple(Tool(*t) for t in data["tools"]),
        tool_choice=ToolChoice(mode, name, parallel),
        split_reasoning=data["split_reasoning"], reasoning_budget=data["reasoning_budget"],
        think=data.get("think", False),  # absent: logged by a replica before the field
        prompt_ids=tuple(data["prompt_ids"]) if "prompt_ids" in data else None,
        token_ids=data.get("token_ids", False))
