"""Token logprobs: the log-softmax of a row, and their alignment with the text the scheduler
releases (stop strings held back or cut, a thinking section, a slow reader's merged deltas),
driven by a scripted engine whose pieces carry one token each."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest

from tokenpipe.engines.base import EngineOptions, PreparedRequest
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.logprobs import log_softmax_top
from tokenpipe.scheduler import Scheduler
from tokenpipe.session import Delta, Finished
from tokenpipe.types import (
    EngineEvent,
    EngineFinish,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    Message,
    SamplingParams,
    TokenLogprob,
    Tool,
    Usage,
)


def test_log_softmax_top_matches_the_definition_and_skips_masked_tokens() -> None:
    row = np.array([1.0, 3.0, -np.inf, 2.0, 0.5], dtype=np.float32)
    value, top = log_softmax_top(row, 3, 4)
    finite = [1.0, 3.0, 2.0, 0.5]
    lse = math.log(sum(math.exp(x) for x in finite))
    assert value == pytest.approx(2.0 - lse)
    assert [i for i, _ in top] == [1, 3, 0, 4]  # best first, the masked token left out
    assert top[0][1] == pytest.approx(3.0 - lse)
    assert sum(math.exp(lp) for _, lp in top) == pytest.approx(1.0)
    assert log_softmax_top(row, 1, 0)[1] == []


class Scripted(FakeEngine):
    """Streams `pieces`: each engine piece is one token whose logprob is -(its number)."""

    pieces: Sequence[str] = ()
    logprobs = True

    def check_output(self, request: GenerationRequest) -> dict[str, object]:
        return {}  # the pieces are scripted: nothing to constrain

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        yield EngineStart(1)
        for i, piece in enumerate(self.pieces):
            entry = TokenLogprob(piece, -float(i), piece.encode())
            yield EngineText(piece, logprobs=(entry,))
        yield EngineFinish(FinishReason.STOP, Usage(1, len(self.pieces)))


async def run(pieces: Sequence[str], *, stop: tuple[str, ...] = (), reasoning: bool = False,
              merge: bool = False, tools: tuple[Tool, ...] = ()) -> tuple[list[Delta], Finished]:
    engine = Scripted.from_options(EngineOptions(context_size=4096))
    engine.pieces = pieces
    request = GenerationRequest(messages=(Message("user", "hi"),), split_reasoning=reasoning,
                                params=SamplingParams(stop=stop, logprobs=0), tools=tools)
    session = Scheduler(engine).submit(request)
    await session.done.wait()
    events = session.cursor().poll(merge=merge)
    final = events[-1]
    assert isinstance(final, Finished)
    return [e for e in events if isinstance(e, Delta)], final


def shown(deltas: list[Delta]) -> list[tuple[str, list[str]]]:
    return [(d.text, [e.token for e in d.logprobs]) for d in deltas]


async def test_each_token_travels_with_the_text_that_completes_it() -> None:
    deltas, _ = await run(["A", " b", "XY", " c"], stop=("XYZ",))
    # "XY" may start the stop string: held back, then released with " c"
    assert shown(deltas) == [("A", ["A"]), (" b", [" b"]), ("XY c", ["XY", " c"])]
    assert [e.offset for d in deltas for e in d.logprobs] == [0, 1, 3, 5]


async def test_a_stop_strings_tokens_are_not_reported() -> None:
    deltas, final = await run(["A", "XY", "Z!", "B"], stop=("XYZ",))
    assert final.reason is FinishReason.STOP
    assert "".join(d.text for d in deltas) == "A"
    assert [e.token for d in deltas for e in d.logprobs] == ["A"]


async def test_a_token_cut_by_the_stop_string_goes_with_the_last_text() -> None:
    deltas, _ = await run(["A", "bXY", "Z"], stop=("XYZ",))
    assert "".join(d.text for d in deltas) == "Ab"
    # "bXY" showed "b": reported, once, at the end; "Z" belongs to the stop string
    assert [e.token for d in deltas for e in d.logprobs] == ["A", "bXY"]


async def test_a_thinking_sections_tokens_are_not_content_logprobs() -> None:
    deltas, _ = await run(["<think>", "hmm", "</think>", "\n\nHi", " there"], reasoning=True)
    content = [d for d in deltas if d.channel == "content"]
    assert "".join(d.text for d in content) == "Hi there"
    assert [e.token for d in content for e in d.logprobs] == ["\n\nHi", " there"]
    assert all(not d.logprobs for d in deltas if d.channel == "reasoning")


async def test_merged_deltas_carry_the_same_logprobs_in_order() -> None:
    pieces = ["One", " two", "<", "<", " three", "!"]
    apart, _ = await run(pieces, stop=("<<<",))
    together, _ = await run(pieces, stop=("<<<",), merge=True)
    assert len(together) < len(apart)
    flat = [(e.token, e.logprob, e.offset) for d in apart for e in d.logprobs]
    assert flat == [(e.token, e.logprob, e.offset) for d in together for e in d.logprobs]
    assert [t for t, _, _ in flat] == pieces


async def test_a_tool_calls_tokens_are_not_content_logprobs() -> None:
    call = ['<tool_call>\n{"name": "', 'f", "arguments": ', '{"x": 1}', '}\n</tool_call>']
    deltas, final = await run(call, tools=(Tool("f"),))
    assert final.reason is FinishReason.TOOL_CALLS
    assert [d.channel for d in deltas] == ["tool_call"] * len(deltas)
    assert all(not d.logprobs for d in deltas)
    deltas, _ = await run(["Just", " text"], tools=(Tool("f"),))
    assert shown(deltas) == [("Just", ["Just"]), (" text", [" text"])]
