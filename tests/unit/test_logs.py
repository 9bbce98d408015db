"""The log: a traceback of a kind already written within the interval is left out, the
line stays and says why; other kinds and later ones are written in full."""

from __future__ import annotations

import io
import logging

from tokenpipe.logs import RedactSecrets, ThrottleTracebacks


def _logger(interval_s: float) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(ThrottleTracebacks(interval_s))
    handler.addFilter(RedactSecrets(["sk-secret-key"]))
    logger = logging.getLogger(f"tokenpipe.test.logs.{interval_s}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    return logger, out


def _fail(logger: logging.Logger, exc: Exception, what: str = "handling %s failed") -> None:
    try:
        raise exc
    except Exception:
        logger.exception(what, "req-1")


def test_one_traceback_per_kind_and_interval() -> None:
    logger, out = _logger(60.0)
    for _ in range(50):
        _fail(logger, RecursionError("maximum recursion depth exceeded"))
    text = out.getvalue()
    assert text.count("Traceback (most recent call last)") == 1
    assert text.count("handling req-1 failed") == 50  # every line stays
    assert "RecursionError: maximum recursion depth exceeded; its traceback was logged" in text


def test_another_kind_or_message_gets_its_own_traceback() -> None:
    logger, out = _logger(60.0)
    _fail(logger, RecursionError("deep"))
    _fail(logger, ValueError("bad"))
    _fail(logger, RecursionError("deep"), what="storing %s failed")
    assert out.getvalue().count("Traceback (most recent call last)") == 3


def test_after_the_interval_the_traceback_is_written_again() -> None:
    logger, out = _logger(0.0)
    _fail(logger, RecursionError("deep"))
    _fail(logger, RecursionError("deep"))
    assert out.getvalue().count("Traceback (most recent call last)") == 2


def test_a_left_out_traceback_still_has_its_secrets_redacted() -> None:
    logger, out = _logger(60.0)
    _fail(logger, ValueError("key sk-secret-key refused"))
    _fail(logger, ValueError("key sk-secret-key refused"))
    assert "sk-secret-key" not in out.getvalue()
    assert out.getvalue().count("[redacted]") == 2


def test_a_resumable_stream_token_in_an_access_line_is_redacted() -> None:
    logger, out = _logger(60.0)
    logger.setLevel(logging.INFO)
    token = "Zq3_vK-8" * 4
    # uvicorn.access's own format and arguments
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET",
                f"/v1/streams/{token}?last_event_id=3", "1.1", 200)
    line = out.getvalue()
    assert token not in line
    assert 'GET /v1/streams/[redacted]?last_event_id=3 HTTP/1.1" 200' in line
