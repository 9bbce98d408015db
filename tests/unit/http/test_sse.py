"""The SSE decoder (tokenpipe.http.sse), alone (STYLE.md item 7): whatever way the network
splits a stream, the same events come out."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpipe.http.sse import ServerSentEvent, SSEDecoder

# Values hold no CR or LF (those end lines); they may hold anything else, including
# multi-byte characters, U+2028 (a line separator to str.splitlines, data to SSE), colons
# and leading spaces.
VALUE = st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"),
                max_size=12) | st.sampled_from(
    ["日本語", "🎉👩‍💻", "a\u2028b", " x: y", "{\"k\": 1}"])
NAME = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)
EOL = st.sampled_from(["\n", "\r", "\r\n"])


@dataclass
class Spec:
    data: list[str]
    event: str | None
    id: str | None
    comments: list[str]


SPEC = st.builds(Spec, st.lists(VALUE, min_size=1, max_size=4), st.none() | NAME,
                 st.none() | NAME, st.lists(VALUE, max_size=2))


def render(specs: list[Spec], eol: str) -> tuple[str, list[ServerSentEvent]]:
    lines: list[str] = []
    expected: list[ServerSentEvent] = []
    last_id = ""
    for spec in specs:
        lines += [":" + c for c in spec.comments]
        if spec.event is not None:
            lines.append("event: " + spec.event)
        if spec.id is not None:
            lines.append("id:" + spec.id)
            last_id = spec.id
        lines += ["data: " + d for d in spec.data]
        lines.append("")
        expected.append(ServerSentEvent("\n".join(spec.data), spec.event or "message", last_id))
    return "".join(line + eol for line in lines), expected


def feed_split(data: bytes, cuts: list[int]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    start = 0
    for cut in sorted(set(cuts)):
        events += decoder.feed(data[start:cut])
        start = cut
    events += decoder.feed(data[start:])
    events += decoder.close()
    return events


@settings(max_examples=300, deadline=None)
@given(specs=st.lists(SPEC, max_size=5), eol=EOL, bom=st.booleans(), data=st.data())
def test_any_split_of_a_stream_gives_the_same_events(
    specs: list[Spec], eol: str, bom: bool, data: st.DataObject
) -> None:
    text, expected = render(specs, eol)
    raw = ("\ufeff" if bom else "").encode() + text.encode()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    assert feed_split(raw, cuts) == expected


@settings(max_examples=100, deadline=None)
@given(specs=st.lists(SPEC, min_size=1, max_size=3), eol=EOL)
def test_byte_by_byte_equals_all_at_once(specs: list[Spec], eol: str) -> None:
    raw = render(specs, eol)[0].encode()
    assert feed_split(raw, list(range(len(raw)))) == feed_split(raw, [])


def test_a_multibyte_character_split_across_chunks_arrives_whole() -> None:
    raw = 'data: {"content": "日🎉"}\n\n'.encode()
    at = raw.index("🎉".encode()) + 2  # inside the emoji's four bytes
    decoder = SSEDecoder()
    assert decoder.feed(raw[:at]) == []
    assert decoder.feed(raw[at:]) == [ServerSentEvent('{"content": "日🎉"}')]


def test_an_event_is_ready_as_soon_as_its_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\n\r") == [ServerSentEvent("a")]  # no wait for an LF
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ServerSentEvent("b")]


def test_a_cr_split_from_its_lf_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # the LF completes the CRLF: not a blank line
    assert decoder.feed(b"\r\n") == [ServerSentEvent("a")]


def test_multi_line_data_comments_and_fields() -> None:
    decoder = SSEDecoder()
    stream = (b": ping\n\nevent: update\nid: 7\nretry: 1500\ndata: one\ndata:two\ndata\n\n"
              b"data: after\n\n")
    assert decoder.feed(stream) == [
        ServerSentEvent("one\ntwo\n", "update", "7", 1500),
        ServerSentEvent("after", "message", "7", None),
    ]


def test_lines_without_data_dispatch_nothing_and_bad_fields_are_ignored() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: x\n\nid: a\0b\nretry: soon\nunknown: 1\ndata: y\n\n") == [
        ServerSentEvent("y")
    ]


def test_a_truncated_stream_drops_the_incomplete_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: complete\n\ndata: cut") == [ServerSentEvent("complete")]
    assert decoder.partial
    assert decoder.close() == []
    assert not decoder.partial


def test_invalid_utf8_becomes_a_replacement_character() -> None:
    assert SSEDecoder().feed(b"data: \xff\n\n") == [ServerSentEvent("\ufffd")]
