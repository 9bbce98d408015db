"""State shared between replicas (`--state redis://HOST:PORT/DB`): the resume store in
Redis (redis_store.py; a stream another replica produces is followed and taken over by
follower.py), the event codec its log is written in (codec.py), and the stored
Responses (responses_store.py). The `redis` client is the `redis` extra
(`pip install 'tokenpipe[redis]'`), imported only when a state URL is given."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ...errors import MissingDependency

if TYPE_CHECKING:
    from .redis_store import RedisResumeStore
    from .responses_store import RedisResponseStore

SCHEMES = ("redis", "rediss", "unix")


def check_reachable(url: str, timeout_s: float = 3.0) -> None:
    """Before the server starts: RuntimeError naming the URL (its password left out) when
    it is not a Redis URL or Redis does not answer."""
    _redis()
    import redis

    from .redis_store import _safe

    if urlsplit(url).scheme not in SCHEMES:
        raise RuntimeError(f"--state {_safe(url)!r} is not a Redis URL "
                           "(redis://HOST:PORT/DB, rediss://..., unix://PATH)")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s,
                                      socket_timeout=timeout_s)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        raise RuntimeError(f"cannot reach the state store {_safe(url)}: {exc}") from None


def shared_store(url: str, grace_s: float, prefix: str, lease_s: float,
                 address: str | None = None) -> RedisResumeStore:
    _redis()
    from .redis_store import RedisResumeStore

    return RedisResumeStore(grace_s, url, prefix, lease_s, address)


def shared_responses(url: str, prefix: str, *, max_age_s: float, max_count: int,
                     max_row_bytes: int, max_bytes: int) -> RedisResponseStore:
    _redis()
    from .responses_store import RedisResponseStore

    return RedisResponseStore(url, prefix, max_age_s=max_age_s, max_count=max_count,
                              max_row_bytes=max_row_bytes, max_bytes=max_bytes)


def _redis() -> None:
    try:
        import redis  # noqa: F401
    except ImportError:
        raise MissingDependency(
            "--state needs the redis client: pip install 'tokenpipe[redis]'") from None
