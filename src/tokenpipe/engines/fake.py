"""A real engine with a scripted model: deterministic text, configurable pace and faults.

Its tokenizer is byte-level (1 to 3 bytes a token, so multi-byte characters get split across
tokens the way a real BPE vocabulary splits them) and its text goes through the same
Utf8Decoder as llama.cpp's. Directives in the last message steer one request:

    [[echo]]            answer with the message text itself (without directives)
    [[fail_after=N]]    raise an engine fault after N tokens
    [[pace_ms=N]]       one token every N ms (decimals allowed) for this request; a reader
                        that falls behind gets the tokens that are due back to back
    [[tokens=N]]        answer with exactly N tokens (repeating the script), then stop
    [[prefill_ms=N]]    "compute" the prompt first, N ms per 512 tokens; a prompt of more
                        than 512 reports its progress after each (EngineProgress), as
                        llama.cpp does for a prompt of more than one chunk

A chat whose last message is the assistant's (a prefill) takes its directives from the
turn before it; an answer so begun that begins as the script does goes on from there, as a
model goes on with its own text (tokens counted from where it ends).

Logprobs are scripted too: token i has log-probability -ln 2 - (i % 4) / 4, listed first
among its alternatives, then made-up ones (`<alt1>`, ...) 2, 3, ... lower (a distribution:
they sum to under 1).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Sequence

from ..errors import EngineError
from ..text import Utf8Decoder
from ..types import (
    EngineEvent,
    EngineFinish,
    EngineProgress,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    TokenLogprob,
    Usage,
)
from .base import PROGRESS_TOKENS, Engine, EngineInfo, EngineOptions, PreparedRequest
from .kind import EngineKind, Option
from .prefill import prefill_of, render_with_prefill

SCRIPT = (
    "Hello! Here is a streamed answer.\n\n"
    "## Code\n\n```python\ndef greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n```\n\n"
    "日本語も大丈夫です。絵文字も 🎉🚀👩‍💻 そのまま届きます。\n\n"
    "- item one\n- item two\n\nThe end."
)
_DIRECTIVE = re.compile(
    r"\[\[(echo|fail_after|pace_ms|tokens|prefill_ms)(?:=(\d+(?:\.\d+)?))?\]\]")
_TOKEN_SIZES = (1, 2, 3, 1, 3, 2)


def fake_tokenize(data: bytes) -> list[int]:
    """Byte-level tokens of 1 to 3 bytes, packed big-endian with the length in the low bits."""
    ids: list[int] = []
    i = k = 0
    while i < len(data):
        size = _TOKEN_SIZES[k % len(_TOKEN_SIZES)]
        piece = data[i : i + size]
        ids.append((int.from_bytes(piece, "big") << 2) | len(piece))
        i += size
        k += 1
    return ids


def fake_token_bytes(token_id: int) -> bytes:
    size = token_id & 3
    return (token_id >> 2).to_bytes(size, "big")


KIND = EngineKind(
    "fake", "tokenpipe.engines.fake:FakeEngine",
    options=(Option("fake_pace_ms", "float", 0.0, attr="pace_ms",
                    help="fake engine: one token every N ms per stream (0: one per loop "
                         "turn)"),),
)


class FakeEngine(Engine):
    kind = KIND
    logprobs = True  # scripted (the module's docstring)

    def __init__(
        self,
        model_id: str = "fake",
        *,
        pace_ms: float = 0.0,
        context_tokens: int = 8192,
        max_batch: int = 64,
        script: str = SCRIPT,
    ) -> None:
        # it writes the think tags a script holds: a client may ask it to think
        self.info = EngineInfo("fake", model_id, context_tokens, max_batch, thinks=True)
        self.pace_ms = pace_ms
        self.script_ids = fake_tokenize(script.encode())

    @classmethod
    def from_options(cls, options: EngineOptions) -> FakeEngine:
        return cls(
            options.model_id or "fake",
            pace_ms=float(KIND.read(options.values)["pace_ms"]),
            context_tokens=options.total_context,
            max_batch=options.parallel,
        )

    async def load(self) -> None:
        return None

    def render(self, request: GenerationRequest) -> str:
        if request.prompt is not None:
            return request.prompt
        # a last assistant message is the answer begun, as on the real engines
        return render_with_prefill(request, lambda r: "".join(
            f"<|{m.role}|>{m.content}<|end|>" for m in r.messages or ()) + "<|assistant|>")

    def tokenize(self, text: str) -> Sequence[int]:
        return fake_tokenize(text.encode())

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        request = prepared.request
        begun = prefill_of(request)  # the answer begun: the directives are the turn's before
        messages = request.messages or ()
        begun_bytes = (begun or "").encode()
        if request.prompt_ids is not None:  # read back (a continuation from ids)
            last, begun_bytes = _read_ids(request.prompt_ids)
        elif request.prompt is not None:
            last = request.prompt
        else:
            last = messages[-2 if begun is not None and len(messages) > 1 else -1].content
        directives = {m.group(1): float(m.group(2) or 0) for m in _DIRECTIVE.finditer(last)}
        script = self.script_ids
        if "echo" in directives:
            script = fake_tokenize(_DIRECTIVE.sub("", last).strip().encode()) or script
        n_script = int(directives.get("tokens", len(script)))
        # an answer begun as this script would have begun it goes on from there, as a
        # model goes on with its own text (a take-over, server/state/)
        skip, rest = _resume_point(script, begun_bytes)
        fail_after = int(directives["fail_after"]) if "fail_after" in directives else None
        pace = directives.get("pace_ms", self.pace_ms) / 1000.0
        yield EngineStart(prepared.prompt_tokens)
        if "prefill_ms" in directives:
            total = prepared.prompt_tokens
            for done in range(PROGRESS_TOKENS, total + PROGRESS_TOKENS, PROGRESS_TOKENS):
                await asyncio.sleep(directives["prefill_ms"] / 1000.0)
                if total > PROGRESS_TOKENS:  # one chunk: no progress, as on llama.cpp
                    yield EngineProgress(min(done, total), total)
        decoder = Utf8Decoder.after(begun_bytes)  # an answer's ids may end in a character
        top = request.params.logprobs
        scored: list[TokenLogprob] = []  # until the text that completes them
        produced = skip
        limit = min(skip + prepared.max_tokens, n_script)
        if rest:  # the bytes of a token the answer begun ends inside (counted then)
            yield EngineText(decoder.feed(rest), tokens=0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while produced < limit:
            # Token i is due at t0 + i * pace, like a model that decodes at a fixed rate
            # whatever its reader does: woken late (a busy loop), it hands over every token
            # that is due, back to back, as an engine thread's queue would.
            due = 1
            if pace > 0:
                wait = t0 + (produced - skip + 1) * pace - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                due = max(1, int((loop.time() - t0) / pace) - (produced - skip))
            else:
                await asyncio.sleep(0)  # full speed: one token per turn of the event loop
            for _ in range(min(due, limit - produced)):
                if fail_after is not None and produced >= fail_after:
                    raise EngineError(f"fake engine fault after {produced} tokens")
                produced += 1
                token = script[(produced - 1) % len(script)]
                piece = fake_token_bytes(token)
                text = decoder.feed(piece)
                if top is None:
                    yield EngineText(text, token_ids=(token,))
                    continue
                scored.append(_scripted(piece, produced - 1, top))
                yield EngineText(text, logprobs=tuple(scored) if text else (),
                                 token_ids=(token,))
                if text:
                    scored.clear()
        tail = decoder.flush()
        if tail or scored:
            yield EngineText(tail, tokens=0, logprobs=tuple(scored))
        reason = FinishReason.STOP if produced >= n_script else FinishReason.LENGTH
        yield EngineFinish(reason, Usage(prepared.prompt_tokens, produced))


def _read_ids(ids: tuple[int, ...]) -> tuple[str, bytes]:
    """A prompt given as ids: (the text its directives are read from, the bytes of the
    answer begun, which may end inside a character). A rendered chat's ids are its last
    user turn and what follows its assistant tag."""
    data = b"".join(_bytes_or_none(i) for i in ids)
    turns, tag, begun = data.rpartition(b"<|assistant|>")
    if not tag:
        return data.decode("utf-8", "replace"), b""
    last = turns.rpartition(b"<|user|>")[2].partition(b"<|end|>")[0]
    return last.decode("utf-8", "replace"), begun


def _bytes_or_none(token_id: int) -> bytes:
    """A fake token's bytes; nothing for an id no fake token has (a client's own ids)."""
    try:
        return fake_token_bytes(token_id)
    except OverflowError:
        return b""


def _resume_point(script: list[int], begun: bytes) -> tuple[int, bytes]:
    """Where the script goes on after an answer begun with `begun`: (tokens done, the rest
    of the token it ends inside); (0, b"") when the script does not begin so."""
    done, i, n = 0, 0, len(script)
    while done < len(begun):
        piece = fake_token_bytes(script[i % n])
        if begun[done:done + len(piece)] != piece[:len(begun) - done]:
            return 0, b""
        if done + len(piece) > len(begun):
            return i + 1, piece[len(begun) - done:]
        done += len(piece)
        i += 1
    return i, b""


def _scripted(piece: bytes, i: int, top: int) -> TokenLogprob:
    value = -math.log(2) - (i % 4) / 4
    token = piece.decode("utf-8", "replace")
    alternatives = [(token, value, piece)] + [
        (f"<alt{j}>", value - j - 1, f"<alt{j}>".encode()) for j in range(1, top)]
    return TokenLogprob(token, value, piece, tuple(alternatives[:top]))
