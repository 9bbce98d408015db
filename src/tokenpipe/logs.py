"""Logging set-up: plain text or one JSON object per line (--log-format json).

Generation log lines carry `request_id` (gen-...) so one answer can be followed through.
Credentials never reach a log line, whoever logs them: at debug level websockets prints
every handshake header (`Authorization: Bearer ...`, the `tokenpipe.bearer.<key>`
subprotocol), so a filter on the handler redacts credential headers, bearer tokens, the
bearer subprotocol, resumable stream tokens in paths and the configured keys themselves,
in messages, tracebacks and extras.
A traceback of a kind already logged within the minute is left out (ThrottleTracebacks).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Iterable
from typing import Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
REDACTED = "[redacted]"
_CREDENTIAL_HEADERS = r"(?:proxy-)?authorization|x-api-key|api-key|cookie|set-cookie"
_PATTERNS = [
    # "Authorization: Bearer k", "cookie=a=b" (header lines, key=value pairs)
    re.compile(rf"(?im)\b({_CREDENTIAL_HEADERS})(\s*[:=]\s*)(?![\s'\"])[^\r\n]*"),
    # ('authorization', 'Bearer k'), (b"cookie", b"a=b"), {"x-api-key": "k"} (reprs)
    re.compile(rf"(?i)(['\"](?:{_CREDENTIAL_HEADERS})['\"]\s*[,:]\s*b?)(['\"])[^'\"]*"),
    re.compile(r"(?i)\b(bearer)(\s+)[^\s'\",;]+"),
    re.compile(r"(tokenpipe\.bearer\.)()[A-Za-z0-9_\-=+/]*"),
    # a resumable stream's token is its reader's only credential: uvicorn's access log
    # prints the path it rides in (GET /v1/streams/TOKEN)
    re.compile(r"(/streams/)()[A-Za-z0-9_\-]+"),
]


class RedactSecrets(logging.Filter):
    """Rewrites a record so that no credential is in it; never drops one."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        literal: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= 6:  # a shorter one would redact ordinary words
                raw = secret.encode()
                literal |= {secret, base64.urlsafe_b64encode(raw).decode().rstrip("="),
                            base64.b64encode(raw).decode().rstrip("=")}
        self._literal = (re.compile("|".join(re.escape(s) for s in sorted(literal, key=len,
                                                                       reverse=True)))
                         if literal else None)

    def redact(self, text: str) -> str:
        for pattern in _PATTERNS:
            text = pattern.sub(_keep_name, text)
        if self._literal is not None:
            text = self._literal.sub(REDACTED, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the formatter reports it as usual
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self.redact(value))
        return True


def _keep_name(match: re.Match[str]) -> str:
    """The header's name and separator (or a repr's quote) stay; its value goes."""
    return match.group(1) + match.group(2) + REDACTED


class ThrottleTracebacks(logging.Filter):
    """One traceback per kind (logger, exception type, message) and `interval_s`: a client
    that can make the server fail the same way over and over must not fill the log with
    the same traceback. The line itself stays, without its traceback, saying when it was
    last written in full."""

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[tuple[str, str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or record.exc_info[0] is None:
            return True
        kind = (record.name, record.exc_info[0].__qualname__, str(record.msg))
        now = time.monotonic()
        last = self._last.get(kind)
        if last is None or now - last >= self.interval_s:
            if len(self._last) > 1024:  # kinds come from the code, but bound them anyway
                self._last.clear()
            self._last[kind] = now
            return True
        record.msg = f"{record.getMessage()} ({record.exc_info[0].__qualname__}: " \
                     f"{record.exc_info[1]}; its traceback was logged {now - last:.0f} s ago)"
        record.args = None
        record.exc_info = record.exc_text = None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_text:  # what the filter redacted
            entry["exc"] = record.exc_text
        elif record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup_logging(level: str, fmt: str, secrets: Iterable[str | None] = ()) -> dict[str, Any]:
    """Configures the root logger; returns a uvicorn log_config that uses the same format.
    `secrets` (the API keys) are redacted wherever they would appear, as is every
    credential header."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ThrottleTracebacks())  # before the redaction, which formats them
    handler.addFilter(RedactSecrets(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return {"version": 1, "disable_existing_loggers": False,
            "loggers": {name: {"handlers": [], "propagate": True}
                        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")}}
