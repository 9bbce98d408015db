"""The log's event codec (server/state/codec.py): every session event comes back equal,
and a replayed session gives a reader the deltas the producing session gave its readers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpipe.errors import ContextOverflow, TokenpipeError
from tokenpipe.server.state import codec
from tokenpipe.session import (
    Delta,
    Failed,
    Finished,
    GenerationSession,
    Progress,
    Queued,
    Started,
)
from tokenpipe.types import FinishReason, Part, Timing, TokenLogprob, Usage

USAGE = Usage(12, 30, 4, 2, drafted_tokens=9, accepted_tokens=6)
EVENTS = [
    Queued(3), Queued(0, loading=True), Started("m", 12, "tok"), Started("m", None, None),
    Progress(512, 2048), Delta(0, "héllo 🎉"), Delta(1, "", "tool_call", 1, "call_1", "f"),
    Delta(2, '{"a":', "tool_call", 1), Delta(3, "hmm", "reasoning"),
    Delta(5, "ids", token_ids=(7, 8)),
    Delta(4, "x", logprobs=(TokenLogprob("x", -0.5, b"x", (("x", -0.5, b"x"),
                                                           ("\ufffd", -2.0, b"\xe3")), 7),)),
    Finished(FinishReason.LENGTH, USAGE, Timing(1.5, 20.25, 300.0, 88.5), None),
    Finished(FinishReason.STOP, USAGE, Timing(0, None, 1, None), "END"),
]


@pytest.mark.parametrize("event", EVENTS)
def test_every_event_comes_back_equal(event: object) -> None:
    assert codec.decode(codec.encode(event)) == event  # type: ignore[arg-type]


def test_a_failure_comes_back_as_its_error_class() -> None:
    back = codec.decode(codec.encode(Failed(ContextOverflow("too long", param="messages"),
                                            USAGE)))
    assert isinstance(back, Failed) and isinstance(back.error, ContextOverflow)
    assert (back.error.message, back.error.param, back.error.status) == (
        "too long", "messages", 400)
    odd = TokenpipeError("?")
    odd.code = "from_a_newer_replica"
    again = codec.decode(codec.encode(Failed(odd, USAGE)))
    assert isinstance(again, Failed) and again.error.code == "from_a_newer_replica"


@given(st.lists(st.one_of(st.text(), st.builds(
    Part, st.text(), st.sampled_from(["content", "reasoning", "tool_call"]),
    st.integers(0, 3))), max_size=12))
async def test_a_replayed_session_reads_like_the_producer(pieces: list[str | Part]) -> None:
    producer = GenerationSession(None, "m", resumable=True)
    producer.mark_started(5)
    producer.add_pieces(pieces, len(pieces))
    producer.finish(FinishReason.STOP)
    logged = [codec.decode(codec.encode(e)) for e in producer.cursor(-1).poll(merge=False)]
    replayed = GenerationSession(None, "m", resumable=True)
    for event in logged:
        if isinstance(event, Started):
            replayed.mark_started(event.prompt_tokens)
        elif isinstance(event, Delta):
            replayed.replay(event)
        elif isinstance(event, (Finished, Failed)):
            replayed.end_with(event)
    for after in range(-1, producer.next_seq):
        theirs = [e for e in producer.cursor(after).poll() if isinstance(e, Delta)]
        ours = [e for e in replayed.cursor(after).poll() if isinstance(e, Delta)]
        assert ours == theirs
    with pytest.raises(ValueError):
        replayed.replay(Delta(producer.next_seq + 5, "a gap"))


def test_a_request_comes_back_equal() -> None:
    from tokenpipe.types import (
        GenerationRequest,
        Message,
        OutputFormat,
        SamplingParams,
        Tool,
        ToolCall,
        ToolChoice,
    )

    requests = [
        GenerationRequest(prompt="Once upon", params=SamplingParams(max_tokens=9, seed=3)),
        GenerationRequest(prompt="", prompt_ids=(1, 2, 3), token_ids=True),
        GenerationRequest(
            messages=(Message("system", "be brief"), Message("user", "héllo 🎉"),
                      Message("assistant", "", (ToolCall("c1", "f", '{"a":1}'),)),
                      Message("tool", "42", tool_call_id="c1")),
            params=SamplingParams(temperature=0.7, top_p=0.9, stop=("END",), logprobs=2,
                                  given=frozenset({"temperature", "stop"})),
            model="m", format=OutputFormat("json_schema", '{"type":"object"}', "x", True),
            tools=(Tool("f", "a function", '{"type":"object"}'),),
            tool_choice=ToolChoice("function", "f", False), split_reasoning=True,
            reasoning_budget=64, think=True),
    ]
    for request in requests:
        back = codec.decode_request(codec.encode_request(request))
        assert back == request and back.params.given == request.params.given


def test_the_request_codec_knows_every_field() -> None:
    """A field added to GenerationRequest or SamplingParams must be added to the codec:
    a take-over would run the request without it."""
    import dataclasses

    from tokenpipe.types import GenerationRequest, SamplingParams

    assert {f.name for f in dataclasses.fields(GenerationRequest)} == {
        "messages", "prompt", "params", "model", "format", "tools", "tool_choice",
        "split_reasoning", "reasoning_budget", "think", "prompt_ids", "token_ids"}
    assert {f.name for f in dataclasses.fields(SamplingParams)} == set(
        json.loads(codec.encode_request(GenerationRequest(prompt="x")))["params"])
