"""Property tests of the sans-IO text layer: random splits never garble or lose text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpipe.engines.fake import fake_token_bytes, fake_tokenize
from tokenpipe.text import IdDetokenizer, StopMatcher, Utf8Decoder

SAMPLES = [
    "こんにちは、世界！日本語のテキストです。",
    "emoji 🎉🚀 family 👨‍👩‍👧‍👦 flags 🇯🇵🇫🇷 skin 👍🏽",
    'def f(x):\n    return {"a": [1, 2]}  # ` ``` \\n\t',
    "mixed: café naïve Ωμέγα 中文 한국어 ✓",
]
texts = st.one_of(st.sampled_from(SAMPLES), st.text(max_size=200))


def split_points(draw: st.DrawFn, n: int) -> list[int]:
    return sorted(draw(st.lists(st.integers(0, n), max_size=20)))


@st.composite
def byte_splits(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    text = draw(texts)
    data = text.encode()
    cuts = split_points(draw, len(data))
    pieces, last = [], 0
    for c in [*cuts, len(data)]:
        pieces.append(data[last:c])
        last = c
    return text, pieces


@given(byte_splits())
def test_utf8_decoder_never_splits_a_character(case: tuple[str, list[bytes]]) -> None:
    text, pieces = case
    decoder = Utf8Decoder()
    out = [decoder.feed(p) for p in pieces]
    out.append(decoder.flush())
    assert "".join(out) == text
    assert "\ufffd" not in "".join(out) or "\ufffd" in text


def test_utf8_decoder_drops_a_character_cut_off_at_the_end() -> None:
    decoder = Utf8Decoder()
    assert decoder.feed("a日".encode()[:3]) == "a"
    assert decoder.flush() == ""
    assert decoder.feed(b"\xff") == "\ufffd"  # invalid bytes mid-stream stay visible


def _byte_vocab_decode(ids: list[int]) -> str:
    return b"".join(fake_token_bytes(i) for i in ids).decode("utf-8", errors="replace")


@given(texts)
def test_id_detokenizer_reassembles_text_exactly(text: str) -> None:
    ids = fake_tokenize(text.encode())
    detok = IdDetokenizer(_byte_vocab_decode)
    pieces = [detok.feed(i) for i in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces) or "\ufffd" in text


def reference_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """Scans character by character: the stop completed first wins."""
    for end in range(1, len(text) + 1):
        hits = [s for s in stops if text[:end].endswith(s)]
        if hits:
            longest = max(hits, key=len)
            return text[: end - len(longest)], True
    return text, False


@st.composite
def stop_cases(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    text = draw(texts)
    stops = draw(st.lists(st.one_of(
        st.text(min_size=1, max_size=4),
        st.builds(lambda t, a, n: t[a : a + n] or "x", st.just(text), st.integers(0, 50),
                  st.integers(1, 5)),
    ), min_size=0, max_size=3))
    cuts = split_points(draw, len(text))
    pieces, last = [], 0
    for c in [*cuts, len(text)]:
        pieces.append(text[last:c])
        last = c
    return text, stops, pieces


@settings(max_examples=300)
@given(stop_cases())
def test_stop_matcher_equals_unsplit_reference(case: tuple[str, list[str], list[str]]) -> None:
    text, stops, pieces = case
    matcher = StopMatcher(stops)
    out = [matcher.feed(p) for p in pieces]
    out.append(matcher.flush())
    expected, stopped = reference_stop(text, stops)
    assert "".join(out) == expected
    assert matcher.stopped == stopped
    if stopped:  # it names the stop string that ended the text: the one right after it
        assert matcher.matched in stops and text.startswith(expected + matcher.matched)
    else:
        assert matcher.matched is None
    for stop in stops:  # no piece ever carries any part of the stop that ended it
        if stopped:
            assert stop not in "".join(out)


def test_stop_matcher_holds_back_a_partial_stop_across_pieces() -> None:
    m = StopMatcher(["<end>"])
    assert m.feed("hello <e") == "hello "
    assert m.feed("n") == ""
    assert m.feed("d> tail") == ""
    assert m.stopped and m.matched == "<end>"


def test_stop_matcher_releases_a_false_alarm() -> None:
    m = StopMatcher(["<end>"])
    assert m.feed("a <en") == "a "
    assert m.feed("trance") == "<entrance"
    assert m.flush() == ""
    assert not m.stopped
