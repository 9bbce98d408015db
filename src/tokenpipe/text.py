"""Sans-IO text assembly: UTF-8-safe incremental detokenization, stop-string hold-back, and
the split of an answer into content and tool calls.

Nothing here does I/O or knows about engines; engines feed token bytes or ids in, the
session feeds text through a StopMatcher. Every class is deterministic and property-tested.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from .types import Part


class Utf8Decoder:
    """Bytes from byte-level tokens in, complete characters out, never half a character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @classmethod
    def after(cls, earlier: bytes) -> Utf8Decoder:
        """A decoder that goes on from `earlier`: the first bytes fed complete a character
        that `earlier` ends inside (an answer continued from its token ids, whose last
        token may end in the middle of one, its text not sent yet)."""
        decoder = cls()
        decoder.feed(earlier[-3:])  # a character's lead: at most 3 of its 4 bytes
        return decoder

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data, final=False)

    def flush(self) -> str:
        """At end of stream: a character cut off by max_tokens is dropped, not garbled."""
        self._decoder.reset()
        return ""


class IdDetokenizer:
    """Incremental detokenization for tokenizers that only decode whole id sequences.

    Decodes a short window of ids and emits only the part that is new and complete: a window
    whose decoding ends in U+FFFD is holding part of a character and waits for more ids.
    """

    def __init__(self, decode: Callable[[Sequence[int]], str], prompt_ids: Sequence[int] = ()):
        self._decode = decode
        self._ids: list[int] = list(prompt_ids[-4:])  # context so leading spaces decode right
        self._prefix = 0
        self._read = len(self._ids)

    def feed(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        # A character cut off by max_tokens decodes as U+FFFD: drop it, as Utf8Decoder does.
        return full_text[len(prefix_text) :].removesuffix("\ufffd")


class StopMatcher:
    """Holds back text that may be the start of a stop string; never emits any part of one.

    The generation stops at the stop string that is completed first (its end is earliest in
    the text; on a tie, the longer one). That rule makes the result independent of how the
    text was split into pieces, so streamed and non-streamed output are equal.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self._stops = tuple(stops)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text, once one did

    def feed(self, text: str) -> str:
        """Returns the text that is now safe to send. After a stop, returns "" forever."""
        if self.stopped or not text:
            return ""
        if not self._stops:
            return text
        buf = self._held + text
        # (end, start, stop): completed first, then longest
        best: tuple[int, int, str] | None = None
        for stop in self._stops:
            start = buf.find(stop)
            if start >= 0:
                key = (start + len(stop), start, stop)
                if best is None or key[:2] < best[:2]:
                    best = key
        if best is not None:
            self.stopped = True
            self.matched = best[2]
            self._held = ""
            return buf[: best[1]]
        keep = self._longest_partial(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """At end of generation without a stop: the held text was not a stop after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_partial(self, buf: str) -> int:
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), longest, -1):
                if buf.endswith(stop[:n]):
                    longest = n
                    break
        return longest


class ToolCallSplitter:
    """An answer that may be tool calls, split into content text and tool-call parts.

    The grammar the answer was generated under (constrain/tools.py) allows either text that
    never holds the opening tag, or calls written exactly as `open + head + NAME + mid +
    ARGUMENTS + close`, separated by `between`; so this reads them with no guessing, and
    streams each call's arguments as they are written. `feed` returns, in order, content
    strings and Parts (a call's first Part has its id and name and empty text; the next
    ones its argument JSON). Text the grammar would not write where it stands (only an
    engine without the grammar could) is passed on as content from that point."""

    def __init__(self, open_: str, head: str, mid: str, close: str, between: str,
                 new_id: Callable[[], str]) -> None:
        self._open, self._head, self._mid = open_, head, mid
        self._close, self._between = close, between
        self._new_id = new_id
        self._state = "start"
        self._buf = ""
        self.calls = 0  # calls begun
        self._depth = 0  # the argument JSON's nesting, outside strings
        self._in_string = self._escaped = self._opened = False

    def feed(self, text: str) -> list[str | Part]:
        out: list[str | Part] = []
        if self._state == "text":  # the common case: a plain answer
            if text:
                out.append(text)
            return out
        self._buf += text
        while self._buf and self._step(out):
            pass
        return out

    def flush(self) -> list[str | Part]:
        """At the end: held text that turned out to be content (a call cut short by
        max_tokens before its name is complete is left out: no call had begun)."""
        held, self._buf = self._buf, ""
        if held and self._state in ("start", "text", "between"):
            return [held]
        return []

    def _step(self, out: list[str | Part]) -> bool:
        """Consumes what it can of the buffer; False when it must wait for more."""
        buf, state = self._buf, self._state
        if state in ("start", "between"):
            expect = self._open if state == "start" else self._between + self._open
            if buf.startswith(expect):
                self._buf, self._state = buf[len(expect):], "head"
                return True
            if expect.startswith(buf):
                return False  # maybe the tag: wait
            self._state, self._buf = "text", ""
            out.append(buf)
            return False
        if state == "head":
            if not buf.startswith(self._head):
                return self._not_a_call(out) if not self._head.startswith(buf) else False
            end = buf.find('"', len(self._head))
            if end < 0 or len(buf) < end + len(self._mid):
                return False
            if not buf.startswith(self._mid, end):
                return self._not_a_call(out)
            out.append(Part("", "tool_call", self.calls, self._new_id(),
                            buf[len(self._head):end]))
            self._buf, self._state = buf[end + len(self._mid):], "args"
            self._depth, self._in_string, self._escaped, self._opened = 0, False, False, False
            return True
        if state == "args":
            end = self._scan(buf)
            piece = buf if end < 0 else buf[:end]
            if piece:
                out.append(Part(piece, "tool_call", self.calls))
            if end < 0:
                self._buf = ""
                return False
            self._buf, self._state = buf[end:], "close"
            return True
        # close: the rest of the call's wrapper
        if buf.startswith(self._close):
            self._buf, self._state = buf[len(self._close):], "between"
            self.calls += 1
            return True
        return self._not_a_call(out) if not self._close.startswith(buf) else False

    def _scan(self, text: str) -> int:
        """Where the argument JSON ends in `text` (just past its closing bracket), or -1."""
        for i, c in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
                self._opened = True
            elif c in "}]":
                self._depth -= 1
                if self._opened and self._depth == 0:
                    return i + 1
        return -1

    def _not_a_call(self, out: list[str | Part]) -> bool:
        """Text the grammar would not write here: passed on as content from now on."""
        out.append(self._buf)
        self._buf, self._state = "", "text"
        return False


class ReasoningSplitter:
    """An answer that may open with a thinking section (`<think>…</think>`, as DeepSeek R1,
    Qwen3 and their kin write it), split into reasoning Parts and content strings.

    `inside`: the prompt already opened the section (a template whose generation prompt
    ends with the open tag), so the answer starts in it. A section only counts at the very
    start of the answer; the newlines after its close are not content. A tag cut across
    pieces is held back until it is whole, so no piece of a tag is ever sent."""

    def __init__(self, open_: str = "<think>", close: str = "</think>", *,
                 inside: bool = False) -> None:
        self._open, self._close = open_, close
        self._state = "reasoning" if inside else "start"
        self._buf = ""
        self.reasoned = False  # reasoning text was produced

    def feed(self, text: str) -> list[str | Part]:
        if self._state == "content":
            return [text] if text else []
        out: list[str | Part] = []
        self._buf += text
        while self._buf and self._step(out):
            pass
        return out

    def flush(self) -> list[str | Part]:
        held, self._buf = self._buf, ""
        if not held:
            return []
        if self._state == "reasoning":  # cut inside the section: the held partial tag
            return [Part(held, "reasoning")]
        return [] if self._state == "after" else [held]

    @property
    def thinking(self) -> bool:
        """Inside the section, or between its close and the answer."""
        return self._state in ("reasoning", "after")

    def _step(self, out: list[str | Part]) -> bool:
        buf = self._buf
        if self._state == "start":
            if buf.startswith(self._open):
                self._buf, self._state = buf[len(self._open):], "reasoning"
                return True
            if self._open.startswith(buf):
                return False
            self._state, self._buf = "content", ""
            out.append(buf)
            return False
        if self._state == "reasoning":
            end = buf.find(self._close)
            if end >= 0:
                self._emit(out, buf[:end])
                self._buf, self._state = buf[end + len(self._close):], "after"
                return True
            keep = _partial_suffix(buf, self._close)
            self._emit(out, buf[: len(buf) - keep])
            self._buf = buf[len(buf) - keep:]
            return False
        # after the close: newlines before the answer are layout, not content
        rest = buf.lstrip("\n")
        self._buf = ""
        if rest:
            self._state = "content"
            out.append(rest)
        return False

    def _emit(self, out: list[str | Part], text: str) -> None:
        if text:
            self.reasoned = True
            out.append(Part(text, "reasoning"))


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is a start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
