"""The upstream's replicas: which one takes the next request (routing), what the engine
knows of each (health), and what several failed tries become (failover).

Routing: the healthy replica with the fewest requests in flight; ties take turns. Health:
every replica is checked every few seconds (GET /health, or /v1/models where /health is
404, as on Ollama); one that does not list the model yet is listed again until it does.

Health checks and model lists go through a small pool of their own per replica, never the
streams' (engine.py): a check every 2 s must not count as traffic that keeps the streams'
spare connections coming, nor take an idle connection from a request arriving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ...errors import EngineError, EngineUnavailable, Overloaded, TokenpipeError
from ...http import HTTPError, Origin
from .answers import describe, error_fields, parse_json

log = logging.getLogger("tokenpipe.openai")

CONNECT_TIMEOUT_S = 5.0
HEALTH_TIMEOUT_S = 3.0
LIST_TIMEOUT_S = 2 * CONNECT_TIMEOUT_S


@dataclass(eq=False)
class Replica:
    """One upstream server; `healthy` is what the last health check or request learned."""

    base: str
    healthy: bool = False
    why: str = "not checked yet"
    in_flight: int = 0
    health_path: str = "/health"  # falls back to /v1/models where /health is 404 (Ollama)
    verified: bool = False  # its GET /v1/models listed our model; until then, not used
    # it refused vLLM's `return_token_ids` (a 400 naming the field): asked no more
    refuses_token_ids: bool = False

    def mark(self, healthy: bool, why: str = "") -> None:
        if healthy != self.healthy:
            if healthy:
                log.info("upstream %s is healthy again", self.base)
            else:
                log.warning("upstream %s is unhealthy: %s", self.base, why)
        self.healthy, self.why = healthy, why


class Replicas(Sequence[Replica]):
    """The replicas of one model, in the order given."""

    def __init__(self, urls: Sequence[str]) -> None:
        self._members = [Replica(base_url(u)) for u in urls]
        self.turn = 0  # whose turn a tie is
        self._control: dict[Replica, Origin] = {}
        self._headers: Mapping[str, str] = {}

    @overload
    def __getitem__(self, index: int) -> Replica: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Replica]: ...
    def __getitem__(self, index: int | slice) -> Replica | Sequence[Replica]:
        return self._members[index]

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Replica]:
        return iter(self._members)

    def open(self, tls: ssl.SSLContext | None, headers: Mapping[str, str]) -> None:
        self._headers = headers
        self._control = {r: Origin(r.base, tls, max_idle=1, spares=False) for r in self}

    def close(self) -> None:
        for origin in self._control.values():
            origin.close()
        self._control = {}
        for replica in self:
            replica.mark(False, "closed")

    # ---- routing and failover -----------------------------------------------------------
    def pick(self, tried: Sequence[Replica]) -> Replica | None:
        """The healthy replica with the fewest requests in flight; ties take turns."""
        n = len(self._members)
        candidates = [(r.in_flight, (i - self.turn) % n, r) for i, r in enumerate(self)
                      if r.healthy and r not in tried]
        if not candidates:
            return None
        self.turn += 1
        return min(candidates, key=lambda c: c[:2])[2]

    def give_up(self, errors: Sequence[TokenpipeError]) -> TokenpipeError:
        """The one error for a request that every replica tried failed (or none could)."""
        if not errors:
            why = "; ".join(r.why for r in self)
            return EngineUnavailable(f"no healthy upstream: {why}")
        if all(isinstance(e, Overloaded) for e in errors):
            return min(errors, key=lambda e: e.retry_after_ms or 0)
        failed = [e for e in errors if not isinstance(e, Overloaded)]
        if len(failed) == 1:
            return failed[0]
        return EngineError("every upstream failed: " + "; ".join(e.message for e in failed))

    # ---- health -------------------------------------------------------------------------
    async def list_models(self, replica: Replica) -> list[dict[str, Any]] | None:
        """The model cards of GET /v1/models, or None (the replica marked unhealthy)."""
        try:
            response = await self._control[replica].fetch(
                "GET", "/v1/models", headers=self._headers, timeout_s=LIST_TIMEOUT_S)
        except (HTTPError, TimeoutError) as exc:
            replica.mark(False, f"upstream {replica.base} unreachable: {describe(exc)}")
            return None
        if response.status != 200:
            message = error_fields(response.body)[0]
            replica.mark(False, f"upstream {replica.base} answered {response.status} "
                                f"to GET /v1/models: {message}")
            return None
        data = parse_json(response.body)
        cards = data.get("data") if isinstance(data, dict) else None
        return [c for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []

    def choose_model(self, listings: Sequence[list[dict[str, Any]] | None],
                     model: str | None) -> tuple[str, int | None]:
        """The model to serve (the one asked for, or the only one served) and the context
        its card gives, from the first listing of every replica."""
        answered = [(r, cards) for r, cards in zip(self, listings, strict=True)
                    if cards is not None]
        if not answered:
            raise EngineError("; ".join(r.why for r in self))
        if model is None:
            ids = sorted({str(c.get("id")) for _, cards in answered for c in cards})
            if len(ids) != 1:
                raise EngineError(f"upstream {answered[0][0].base} serves "
                                  f"{', '.join(ids) or 'no model'}: choose one with --model")
            model = ids[0]
        card: dict[str, Any] | None = None
        for replica, cards in answered:
            mine = [c for c in cards if c.get("id") == model]
            card = card or (mine[0] if mine else None)
            self.verify(replica, cards, model)
        if card is None:
            raise EngineError("; ".join(r.why for r in self))
        for key in ("max_model_len", "context_length", "context_window"):  # vLLM, others
            if isinstance(card.get(key), int) and card[key] > 0:
                return model, int(card[key])
        return model, None

    def verify(self, replica: Replica, cards: list[dict[str, Any]], model: str) -> None:
        replica.verified = any(c.get("id") == model for c in cards)
        served = ", ".join(str(c.get("id")) for c in cards) or "no model"
        replica.mark(replica.verified, "" if replica.verified else
                     f"upstream {replica.base} serves {served}, not {model}")

    async def watch(self, interval_s: float, model: str) -> None:
        """Checks every replica every interval_s, forever (the engine cancels it)."""
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.gather(*(self.check(r, model) for r in self))

    async def check(self, replica: Replica, model: str) -> None:
        if not replica.verified:  # down at start, or serving another model: list again
            cards = await self.list_models(replica)
            if cards is not None:
                self.verify(replica, cards, model)
            return
        origin = self._control[replica]
        try:
            response = await origin.fetch("GET", replica.health_path, headers=self._headers,
                                          timeout_s=HEALTH_TIMEOUT_S)
            if response.status == 404 and replica.health_path == "/health":
                replica.health_path = "/v1/models"
                response = await origin.fetch("GET", replica.health_path,
                                              headers=self._headers, timeout_s=HEALTH_TIMEOUT_S)
        except (HTTPError, TimeoutError) as exc:
            replica.mark(False, f"upstream {replica.base} unreachable: {describe(exc)}")
            return
        ok = response.status == 200
        replica.mark(ok, "" if ok else f"upstream {replica.base} answered "
                                       f"{response.status} to GET {replica.health_path}")


def base_url(url: str) -> str:
    """An --upstream URL as the paths are joined to it (without a trailing /v1)."""
    base = url.strip().rstrip("/")
    if base.endswith("/v1"):  # people paste the OpenAI base URL; the paths add /v1 back
        base = base[:-3]
    if not re.match(r"https?://[^/]", base):
        raise EngineError(f"--upstream {url!r} is not an http:// or https:// URL")
    return base
