"""The frame budget of one /ws connection: every frame the client sends (text, binary,
ping, pong) takes a token; a refused frame is dropped, at most one `rate_limited` error
goes out per second however many were refused, the socket is not read for the rest of
that second (what the client sends meanwhile waits in its TCP buffer, costing nothing),
and a client that stays over budget second after second is closed (1008) rather than
answered forever."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

NOTICE_INTERVAL_S = 1.0  # at most one rate_limited error per connection per interval


class Verdict(enum.Enum):
    PASS = "pass"  # process the frame
    DROP = "drop"  # refused; the client was told already in this interval
    NOTIFY = "notify"  # refused; send one rate_limited error now
    EVICT = "evict"  # refused, and the flood went on too long: close 1008


class FrameBudget:
    """`rate` frames per second on average, bursts up to twice that; refusals in every
    interval for `evict_after_s` seconds in a row evict the client."""

    def __init__(self, rate: float, evict_after_s: float, *,
                 interval_s: float = NOTICE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, 2 * rate)
        self.tokens = self.capacity
        self.clock = clock
        self.stamp = clock()
        self.interval_s = interval_s
        self.evict_after = max(1, round(evict_after_s / interval_s)) if evict_after_s > 0 else 0
        self.refused = 0  # frames refused since the last notice
        self.last_refused_at: float | None = None
        self._streak_start: int | None = None  # first interval of this run of refusals
        self._last_refusal: int | None = None  # last interval with a refusal
        self._notified: int | None = None  # last interval a notice went out in

    def take(self) -> Verdict:
        if self.rate <= 0:
            return Verdict.PASS
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return Verdict.PASS
        self.refused += 1
        self.last_refused_at = now
        interval = int(now / self.interval_s)
        if self._last_refusal is None or interval > self._last_refusal + 1:
            self._streak_start = interval  # an interval without refusals ended the last run
        self._last_refusal = interval
        assert self._streak_start is not None
        if self.evict_after and interval - self._streak_start >= self.evict_after:
            return Verdict.EVICT
        if self._notified == interval:
            return Verdict.DROP
        self._notified = interval
        return Verdict.NOTIFY

    def hold_s(self) -> float:
        """After a refusal: until just past this interval, when the next may be noticed
        (reads held that long keep a flood's refusals in consecutive intervals)."""
        now = self.clock()
        return (int(now / self.interval_s) + 1) * self.interval_s - now + 0.005

    def refused_since(self, stamp: float) -> bool:
        """A frame was refused at `stamp` (the clock's time) or later."""
        return self.last_refused_at is not None and self.last_refused_at >= stamp

    def retry_after_ms(self) -> int:
        """Until the next frame may pass."""
        return int(max(0.0, 1 - self.tokens) / self.rate * 1000) + 1 if self.rate > 0 else 0

    def notice(self) -> str:
        """The message of a rate_limited error; resets the refused count."""
        refused, self.refused = self.refused, 0
        return (f"too many frames per second (at most {self.rate:g} on average): "
                f"{refused} frame{'s' if refused != 1 else ''} dropped since the last notice; "
                f"frames over the limit get no answer until the next {self.interval_s:g} s")
