"""Sans-IO text assembly: UTF-8-safe incremental detokenization and stop-string hold-back.

Nothing here does I/O or knows about engines; engines feed token bytes or ids in, the
session feeds text through a StopMatcher. Every class is deterministic and property-tested.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence


class Utf8Decoder:
    """Bytes from byte-level tokens in, complete characters out, never half a character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

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

    def feed(self, text: str) -> str:
        """Returns the text that is now safe to send. After a stop, returns "" forever."""
        if self.stopped or not text:
            return ""
        if not self._stops:
            return text
        buf = self._held + text
        best: tuple[int, int] | None = None  # (end, start): completed first, then longest
        for stop in self._stops:
            start = buf.find(stop)
            if start >= 0:
                key = (start + len(stop), start)
                if best is None or key < best:
                    best = key
        if best is not None:
            self.stopped = True
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
