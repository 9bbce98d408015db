"""One log line per kind of event and interval, with the count of those it stood for: a
flood of refusals or of failed accept() calls must not become a flood of log lines."""

from __future__ import annotations

import logging
import time


class ThrottledLog:
    """The first event of a kind is logged at once; the next ones within `interval_s` are
    only counted, and the first after it says how many there were."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            message += " (and %d more since the last such line, %.0f s ago)"
            args = (*args, skipped, now - last if last is not None else 0.0)
        self.logger.warning(message, *args)
