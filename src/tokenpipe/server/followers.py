"""Per-client caps on followers: HTTP streams that read a generation they do not own, a
background response's `GET /v1/responses/{id}?stream=true` and a resumable stream's
`GET /v1/streams/{token}`. Any number of them may follow one generation, and each holds a
connection and a cursor for as long as it runs, so one client address may hold at most
`max_followers_per_client` at once (docs/security.md); the next is a 429 in its door's
shape with `Retry-After`, as for background runs (`max_background_per_client`).

A follower's place is taken when its answer starts to be sent and given back when it
ends, however it ends (`Following`): no route can leak one."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import Overloaded
from .door_response import DoorResponse

RETRY_AFTER_MS = 1000


class Followers:
    """The followers each client address holds now, at most `cap` each (0: no cap)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held: dict[str, int] = {}

    def take(self, client: str) -> Overloaded | None:
        """A place for one more follower of `client`, or the refusal to answer with."""
        held = self.held.get(client, 0)
        if self.cap and held >= self.cap:
            return Overloaded(f"this client follows {held} streams, this server's limit per "
                              "client: close one first", retry_after_ms=RETRY_AFTER_MS)
        self.held[client] = held + 1
        return None

    def give_back(self, client: str) -> None:
        left = self.held[client] - 1
        if left:
            self.held[client] = left
        else:
            del self.held[client]

    def answer(self, follower: DoorResponse, client: str) -> Response:
        """`follower` sent while it holds one of `client`'s places; refused in its door's
        shape when the client holds all of them."""
        return Following(follower, self, client)


class Following(Response):
    """One follower's answer, holding its client's place while it is sent."""

    def __init__(self, follower: DoorResponse, followers: Followers, client: str) -> None:
        self.follower, self.followers, self.client = follower, followers, client
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.followers.take(self.client)
        if refusal is not None:
            await self.follower.error_response(refusal)(scope, receive, send)
            return
        try:
            await self.follower(scope, receive, send)
        finally:
            self.followers.give_back(self.client)
