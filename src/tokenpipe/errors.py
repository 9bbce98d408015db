"""The error hierarchy. Each error carries its tokenpipe.v1 `code` and its HTTP status.

    TokenpipeError
     ├── BadRequest                (bad_request, 400)
     │    ├── ContextOverflow      (context_overflow, 400: prompt plus max_tokens do not fit,
     │    │                         or max_tokens alone is above the context less one;
     │    │                         `param`: max_tokens, messages or prompt)
     │    └── UnknownModel         (unknown_model, 404)
     ├── DuplicateId               (duplicate_id, 409)
     ├── UnknownId                 (unknown_id, 404)
     ├── TooManyStreams            (too_many_streams, 429)
     ├── Overloaded                (overloaded, 429, retry_after_ms)
     ├── Unauthorized              (unauthorized, 401)
     ├── EngineError               (engine_error, 500)
     │    └── EngineUnavailable    (engine_error, 503: not loaded or cannot recover)
     ├── ShuttingDown              (shutting_down, 503)
     └── ReplicaLost               (replica_lost, 502: the replica producing a stream
                                    another replays stopped, or lost the state store)

    MissingDependency (ImportError): an optional extra is not installed; the message is a
    one-line install hint.
"""

from __future__ import annotations


class TokenpipeError(Exception):
    code: str = "engine_error"
    status: int = 500

    def __init__(
        self, message: str, *, param: str | None = None, retry_after_ms: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after_ms = retry_after_ms


class BadRequest(TokenpipeError):
    code = "bad_request"
    status = 400


class ContextOverflow(BadRequest):
    code = "context_overflow"


class UnknownModel(BadRequest):
    code = "unknown_model"
    status = 404


class DuplicateId(TokenpipeError):
    code = "duplicate_id"
    status = 409


class UnknownId(TokenpipeError):
    code = "unknown_id"
    status = 404


class TooManyStreams(TokenpipeError):
    code = "too_many_streams"
    status = 429


class Overloaded(TokenpipeError):
    code = "overloaded"
    status = 429


class Unauthorized(TokenpipeError):
    code = "unauthorized"
    status = 401


class EngineError(TokenpipeError):
    code = "engine_error"
    status = 500


class EngineUnavailable(EngineError):
    status = 503


class ShuttingDown(TokenpipeError):
    code = "shutting_down"
    status = 503


class ReplicaLost(TokenpipeError):
    code = "replica_lost"
    status = 502


class MissingDependency(ImportError):
    """An optional dependency is missing; str() is a one-line install hint."""
