"""What an upstream's answers mean, without I/O: each streamed chunk, the end of an answer,
and the errors that upstreams' refusals become (OpenAI's, vLLM's, llama-server's, TGI's)."""

from __future__ import annotations

import contextlib
import email.utils
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import (
    BadRequest,
    ContextOverflow,
    EngineError,
    Overloaded,
    TokenpipeError,
    UnknownModel,
)
from ...types import (
    EngineEvent,
    EngineFinish,
    EngineParts,
    EngineStart,
    EngineText,
    FinishReason,
    Usage,
)
from .calls import CallAssembler

if TYPE_CHECKING:  # only a type here: replicas.py imports this module
    from .replicas import Replica

_CONTEXT_ERROR = re.compile(r"context[ _](length|size|window)|exceed_context|maximum context|"
                            r"too many tokens|prompt is too long", re.IGNORECASE)
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH,
           "cancelled": FinishReason.CANCELLED, "tool_calls": FinishReason.TOOL_CALLS,
           "function_call": FinishReason.TOOL_CALLS}


class Retry(Exception):
    """This replica failed before the first token: the request may try another."""

    def __init__(self, error: TokenpipeError) -> None:
        super().__init__(error.message)
        self.error = error


class Broke(Exception):
    """This replica failed after its first token (dropped, an error event, silent): the
    text it sent stays sent; the answer may go on on another (engine.py), else `error`
    ends it."""

    def __init__(self, error: EngineError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class Ids:
    """The token ids of one answer over every upstream it ran on, as the upstreams sent
    them (vLLM's `return_token_ids`; tokenpipe's doors give the same): the prompt's (from
    the first upstream) and the answer's so far. `whole`: every chunk of text came with
    its ids, so the answer can go on from them exactly (engines/prefill.py)."""

    prompt: tuple[int, ...] | None = None
    answer: list[int] = field(default_factory=list)
    whole: bool = True


@dataclass
class Progress:
    """What one upstream answer has said so far."""

    texts: int = 0  # content chunks passed on
    tokens: int = 0  # the tokens they counted: their ids where sent, else one a chunk
    finish: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False  # data: [DONE]
    complete: bool = False  # the answer ended well: its connection may be reused
    failure: EngineError | None = None  # an in-band error after text: raised once it is out
    events: list[EngineEvent] = field(default_factory=list)
    calls: CallAssembler | None = None  # the answer's tool calls, once one came
    tools: bool = False  # the request offered tools (else an upstream's calls are dropped)
    # The content passed on, over every upstream of this answer (the engine's list): where
    # another upstream goes on from if this one breaks.
    said: list[str] = field(default_factory=list)
    earlier: int = 0  # tokens of this answer that earlier upstreams produced
    aside: bool = False  # text of another channel came (reasoning_content): not passed on
    ids: Ids = field(default_factory=Ids)  # the answer's token ids (the engine's, shared)


# ---- the upstream's answer, chunk by chunk -----------------------------------------


def handle_event(data: str, progress: Progress, replica: Replica, *, streamed: bool) -> None:
    if progress.done:
        return
    if data == "[DONE]":
        progress.done = True
        return
    try:
        chunk = json.loads(data)  # the str as it is: once per token
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise EngineError(f"upstream {replica.base} sent an event that is not a JSON "
                          f"object: {data[:200]!r}")
    if "error" in chunk:
        message, code, kind = error_fields(data.encode())
        if streamed or progress.texts:  # text came first (maybe in the same read):
            # the text before the error is passed on, then the error ends the answer
            progress.failure = EngineError(f"upstream {replica.base} failed mid-answer: "
                                           f"{message}")
            progress.done = True
            return
        error = _classify(400 if _CONTEXT_ERROR.search(f"{message} {code} {kind}") else 500,
                          replica, message, code, kind)
        raise error if isinstance(error, BadRequest) else Retry(error)
    _prompt_ids(chunk.get("prompt_token_ids"), progress)  # vLLM's chat: the chunk's
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        _prompt_ids(choice.get("prompt_token_ids"), progress)  # its completions: the choice's
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        ids = _ids(choice.get("token_ids"))
        if isinstance(text, str) and text:
            progress.texts += 1
            progress.said.append(text)
            _counted(progress, text, ids)
        elif isinstance(delta, dict) and (delta.get("reasoning_content")
                                          or delta.get("reasoning")):
            progress.aside = True
        elif ids and not (isinstance(delta, dict) and delta.get("tool_calls")):
            _counted(progress, "", ids)  # part of a character: its text comes next
        if progress.tools and isinstance(delta, dict) and (
                delta.get("tool_calls") or delta.get("function_call")):
            if progress.calls is None:
                progress.calls = CallAssembler(replica.base)
            parts = progress.calls.feed(delta.get("tool_calls") or delta["function_call"])
            progress.texts += 1  # a chunk of a call counts as a token, as text does
            progress.tokens += 1
            if parts:
                progress.events.append(EngineParts(tuple(parts), tokens=1))
            else:  # held (no name yet): counted now, passed on once the call begins
                progress.events.append(EngineText("", tokens=1))
        if choice.get("finish_reason"):
            progress.finish = str(choice["finish_reason"])
    if isinstance(chunk.get("usage"), dict):
        progress.usage = chunk["usage"]


def _ids(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(type(i) is int for i in value):
        return tuple(value)
    return None


def _prompt_ids(value: object, progress: Progress) -> None:
    """The prompt's ids, from the answer's first upstream (a continuation's prompt holds
    the text so far too); said to the scheduler once (EngineStart)."""
    ids = _ids(value)
    if ids is not None and progress.ids.prompt is None and not progress.earlier:
        progress.ids.prompt = ids
        progress.events.append(EngineStart(None, ids))


def _counted(progress: Progress, text: str, ids: tuple[int, ...] | None) -> None:
    tokens = 1 if ids is None else len(ids)
    progress.tokens += tokens
    if ids is None:
        progress.ids.whole = False
    else:
        progress.ids.answer.extend(ids)
    progress.events.append(EngineText(text, tokens, token_ids=ids or ()))


def finish_events(progress: Progress, replica: Replica) -> list[EngineEvent]:
    reason = _FINISH.get(progress.finish or "stop")
    if reason is None and progress.finish == "abort":  # vLLM: the request was aborted
        raise EngineError(f"upstream {replica.base} aborted the generation")
    events: list[EngineEvent] = []
    if progress.calls is not None:
        # Calls end whole unless max_tokens (or a cancel) cut the answer: then the text so
        # far is what there is, as on the local engines.
        cut = reason in (FinishReason.LENGTH, FinishReason.CANCELLED)
        parts = progress.calls.finish(whole=not cut)
        if parts:
            events.append(EngineParts(tuple(parts), tokens=0))
        if progress.calls.calls and reason in (None, FinishReason.STOP):
            reason = FinishReason.TOOL_CALLS
    if reason is FinishReason.TOOL_CALLS and not (progress.calls and progress.calls.calls):
        reason = FinishReason.STOP  # "tool_calls" with no call: nothing to call
    usage = progress.usage or {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    completion = completion if isinstance(completion, int) else progress.tokens
    if completion > progress.tokens:  # chunks that carried several tokens, or none of text
        events.append(EngineText("", tokens=completion - progress.tokens))
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    # An answer that moved here: this upstream's prompt held the earlier upstreams' text
    # (as many tokens as they produced, where re-tokenizing gives the same); the answer's
    # completion is theirs and this one's.
    prompt = max(0, prompt - progress.earlier) if isinstance(prompt, int) else 0
    events.append(EngineFinish(reason or FinishReason.STOP,
                               Usage(prompt, max(completion, progress.tokens) + progress.earlier,
                                     min(cached, prompt) if isinstance(cached, int) else 0)))
    return events


def refusal(replica: Replica, status: int, body: bytes, headers: Mapping[str, str]
            ) -> Exception:
    """The error for a non-200 answer (headers: lower-case names): a Retry where another
    replica may do better."""
    message, code, kind = error_fields(body)
    error = _classify(status, replica, message, code, kind)
    if isinstance(error, BadRequest) and error.param is None:
        error.param = _error_param(body)  # the field the client should fix
    if status == 429:
        error.retry_after_ms = _retry_after_ms(headers) or 1000
    if status in (502, 503, 504):
        replica.mark(False, f"upstream {replica.base} answered {status}: {message}")
    if isinstance(error, UnknownModel):  # this replica lost the model; others may have it
        replica.verified = False
        replica.mark(False, f"upstream {replica.base} no longer serves the model: {message}")
        return Retry(error)
    return Retry(error) if status == 429 or status >= 500 else error


def _classify(status: int, replica: Replica, message: str, code: str, kind: str
              ) -> TokenpipeError:
    said = f"{message} {code} {kind}"
    if status in (400, 413, 422):
        if _CONTEXT_ERROR.search(said):
            return ContextOverflow(message)
        return BadRequest(message)
    if status == 404 and re.search("model", said, re.IGNORECASE):
        return UnknownModel(message, param="model")
    if status == 429:
        return Overloaded(f"upstream {replica.base} is busy: {message}")
    if status in (401, 403):
        return EngineError(f"upstream {replica.base} refused our key ({status}): {message} "
                           "(check --upstream-key)")
    return EngineError(f"upstream {replica.base} answered {status}: {message}")


def error_fields(body: bytes) -> tuple[str, str, str]:
    """(message, code, type) from the error shapes of OpenAI, vLLM, llama-server and TGI."""
    data = parse_json(body)
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return (str(error.get("message") or error.get("detail") or error)[:500],
                    str(error.get("code") or ""), str(error.get("type") or ""))
        if isinstance(error, str):
            return error[:500], "", str(data.get("error_type") or "")
    return body.decode(errors="replace")[:500] or "(no body)", "", ""


def _error_param(body: bytes) -> str | None:
    data = parse_json(body)
    error = data.get("error") if isinstance(data, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) and param else None


def _retry_after_ms(headers: Mapping[str, str]) -> int | None:
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in headers:
            return max(0, int(float(headers["retry-after-ms"])))
        value = headers.get("retry-after")
        if value is None:
            return None
        if value.strip().isdigit():
            return int(value) * 1000
        when = email.utils.parsedate_to_datetime(value).timestamp()
        return max(0, int((when - time.time()) * 1000))
    return None


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
