"""The openai engine: the answer streams from an OpenAI-compatible server (vLLM, llama.cpp's
llama-server, Ollama's /v1, TGI, another tokenpipe), so every tokenpipe feature works on
top of an engine built for GPUs and thousands of users.

    tokenpipe serve --engine openai --upstream http://gpu1:8000,http://gpu2:8000

Several URLs are replicas of one model. A request goes to the healthy replica with the
fewest requests in flight. Until its first token it may move: a refused connection, a 5xx,
a 429 or no token within the first-token timeout tries the next healthy replica. After the
first token, a replica that drops the stream, sends an error event or goes silent (the idle
timeout) breaks the answer there: where going on gives the same answer (plain content: no
tools, output format, calls or thinking section; engines/prefill.py), the request goes to
the next healthy replica as a continuation: from the token ids where the upstream sent
them (vLLM's `return_token_ids`, asked of every upstream that does not refuse it: a raw
prompt of the prompt's ids and the answer's, max_tokens less exactly those), else the
text so far as the last assistant message (appended to a raw prompt), max_tokens less the
chunks that brought text; the same seed and sampling. The stream goes on, usage adds up.
An answer moves at most once per other replica; else it ends with engine_error.

Closing the stream closes the upstream HTTP response, which is how the upstream learns to
stop (vLLM, llama-server and tokenpipe all abort a generation whose client went away).
Every request goes through tokenpipe.http, the lean HTTP/1.1 client (the hop's hot path):
streams on a pool per replica with spare connections, health checks and model lists on
a small pool of their own (replicas.py). An https:// upstream is verified against the
system's CAs, or the bundle SSL_CERT_FILE names.

No tokenizer lives here: the upstream applies the chat template and counts tokens, so the
prompt's size is known only from the upstream's usage chunk at the end (`start` says
`prompt_tokens: null`), and a prompt too long for the context is refused by the upstream
(its 400 becomes context_overflow).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

from ... import http
from ...constrain.thinking import THINK_OPEN
from ...errors import (
    BadRequest,
    ContextOverflow,
    EngineError,
    EngineUnavailable,
    TokenpipeError,
)
from ...types import EngineEvent, EngineStart, GenerationRequest
from ..base import Engine, EngineInfo, EngineOptions, PreparedRequest, constrained
from ..prefill import continuation, from_ids
from .answers import Broke, Ids, Progress, Retry, describe, finish_events, handle_event, refusal
from .kind import KIND
from .replicas import CONNECT_TIMEOUT_S, Replica, Replicas, log
from .requests import body_of, encoded

DRAIN_TIMEOUT_S = 1.0


class OpenAIEngine(Engine):
    kind = KIND
    health_interval_s = 2.0
    splits_calls = True  # the upstream streams its calls apart (answers.py, calls.py)

    def __init__(
        self,
        upstreams: Sequence[str],
        *,
        api_key: str | None = None,
        model: str | None = None,
        model_id: str | None = None,
        context_tokens: int = 8192,
        parallel: int = 8,
        first_token_timeout_s: float = 60.0,
        idle_timeout_s: float = 30.0,
        continue_answers: bool = True,
    ) -> None:
        if not upstreams:
            raise EngineError("the openai engine needs --upstream URL[,URL...]")
        self.replicas = Replicas(upstreams)
        self.api_key = api_key
        self.model = model
        # thinks: whether the upstream's model can is not known here (None): a request to
        # think is taken, and the section the upstream writes (or sends apart) split off
        self.info = EngineInfo("openai", model_id or model or "upstream", context_tokens,
                               max(1, parallel) * len(self.replicas), thinks=None)
        self._alias = model_id
        self.first_token_timeout_s = first_token_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.continue_answers = continue_answers
        self._open = False
        self._origins: dict[str, http.Origin] = {}  # the streams' pools, by replica base
        self._post_headers: dict[str, str] = {}
        self._watcher: asyncio.Task[None] | None = None
        # What begin() sent, by the prepared request's identity (each entry holds its
        # request, so that id cannot be reused meanwhile): stream() or forget() takes it.
        self._begun: dict[int, _Sent] = {}

    @classmethod
    def from_options(cls, options: EngineOptions) -> OpenAIEngine:
        own = KIND.read(options.values)
        urls = [u for u in (own["upstream"] or "").split(",") if u.strip()]
        return cls(urls, api_key=own["upstream_key"], model=options.model,
                   model_id=options.model_id, context_tokens=options.total_context,
                   parallel=options.parallel,
                   first_token_timeout_s=float(own["upstream_first_token_timeout_s"]),
                   idle_timeout_s=float(own["upstream_idle_timeout_s"]),
                   continue_answers=own["upstream_mid_answer"] == "continue")

    # ---- lifecycle ----------------------------------------------------------------------
    async def load(self) -> None:
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        # One TLS context for every pool: the system's CAs, and SSL_CERT_FILE /
        # SSL_CERT_DIR where set (how a private CA is trusted).
        tls = (ssl.create_default_context()
               if any(r.base.startswith("https:") for r in self.replicas) else None)
        self._origins = {r.base: http.Origin(r.base, tls, max_idle=self.info.max_batch)
                         for r in self.replicas}
        self._post_headers = {"content-type": "application/json",
                              "accept": "text/event-stream", **headers}
        self.replicas.open(tls, headers)
        self._open = True
        listings = await asyncio.gather(*(self.replicas.list_models(r) for r in self.replicas))
        try:
            self.model, context = self.replicas.choose_model(listings, self.model)
        except BaseException:
            await self.aclose()
            raise
        self.info = dataclasses.replace(self.info, model_id=self._alias or self.model,
                                        context_tokens=context or self.info.context_tokens)
        self._watcher = asyncio.create_task(
            self.replicas.watch(self.health_interval_s, self.model), name="upstream-health")

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        self._open = False
        for sent in self._begun.values():
            sent.drop()
        self._begun.clear()
        for origin in self._origins.values():
            origin.close()
        self.replicas.close()

    def healthy(self) -> bool:
        return self._open and any(r.healthy for r in self.replicas)

    # ---- requests -----------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        """For logs only: the upstream applies its own chat template."""
        if request.prompt is not None:
            return request.prompt
        assert request.messages is not None
        return "\n".join(f"{m.role}: {m.content}" for m in request.messages)

    def tokenize(self, text: str) -> Sequence[int]:
        raise EngineError("the openai engine has no tokenizer: its upstream counts tokens")

    def check_output(self, request: GenerationRequest) -> Mapping[str, Any]:
        """The upstream enforces the format and the tools (response_format, tools and
        tool_choice go with the request); it refuses what it cannot, and that refusal
        reaches the client as its 400. Its calls are checked whole as they end
        (calls.py). A thinking budget has no OpenAI parameter to go upstream in."""
        if request.reasoning_budget is not None:
            raise BadRequest("the openai engine cannot apply a thinking budget: OpenAI's "
                             "API has no such parameter for its upstream",
                             param="reasoning_budget")
        return {}

    def prepare(self, request: GenerationRequest, default_max_tokens: int) -> PreparedRequest:
        """No local token count (prompt_ids stays empty): only what is sure without one is
        checked here; the upstream refuses a prompt that does not fit."""
        limit = self.info.context_tokens
        asked = request.params.max_tokens
        max_tokens = min(default_max_tokens, limit - 1) if asked is None else asked
        if constrained(request):
            self.check_output(request)
        if request.params.logprobs is not None:  # not forwarded upstream yet
            raise BadRequest("the openai engine does not pass logprobs on yet",
                             param="logprobs")
        if max_tokens >= limit:  # the prompt takes at least one token
            raise ContextOverflow(f"max_tokens ({max_tokens}) leaves no room for a prompt in "
                                  f"the context of {limit} tokens", param="max_tokens")
        return PreparedRequest(request, self.render(request), (), max_tokens)

    def begin(self, prepared: PreparedRequest) -> None:
        """Admitted at once: the request goes upstream now, on an idle connection, in the
        loop turn it arrived in. Through stream() it would leave a loop turn later, after
        the set-up of every other request that arrived with it (8 at once: 0.7 to 1 ms
        later on average in front of an instant upstream, docs/deployment.md)."""
        turn = self.replicas.turn
        replica = self.replicas.pick([])
        origin = self._origins.get(replica.base) if replica is not None else None
        if replica is None or origin is None:
            return  # stream() finds none either and says so
        path, body = body_of(prepared, self.model)
        conn = origin.send_now(origin.encode("POST", path, encoded(body, replica),
                                             self._post_headers))
        if conn is None:  # no idle connection: stream() connects (or waits for a spare)
            self.replicas.turn = turn  # and picks the replica itself, in the same turn
            return
        replica.in_flight += 1
        self._begun[id(prepared)] = _Sent(prepared, replica, conn, path, body)

    def forget(self, prepared: PreparedRequest) -> None:
        sent = self._begun.pop(id(prepared), None)
        if sent is not None:
            sent.drop()

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        sent = self._begun.pop(id(prepared), None)
        try:
            yield EngineStart(None)
        except BaseException:
            if sent is not None:
                sent.drop()
            raise
        path, body = (sent.path, sent.body) if sent is not None else body_of(prepared, self.model)
        tried: list[Replica] = []  # each replica serves one answer once: a bound on moves
        errors: list[TokenpipeError] = []
        said: list[str] = []  # the content passed on, by whichever replicas produced it
        ids = Ids()  # its token ids, where the upstreams send them
        done = 0  # its tokens (their ids where sent, else its chunks)
        broke: EngineError | None = None  # what ended the replica the answer began on
        while True:
            conn: http.Connection | None = None
            if sent is not None:  # begin() chose the replica and counted it in flight
                replica, conn, sent = sent.replica, sent.conn, None
            elif (picked := self.replicas.pick(tried)) is not None:
                replica = picked
                replica.in_flight += 1
            else:
                break
            tried.append(replica)
            progress = Progress(tools=bool(prepared.request.tools), said=said, earlier=done,
                                ids=ids)
            attempt = self._attempt(replica, path, body, conn, progress)
            try:
                async with contextlib.aclosing(attempt) as events:
                    async for event in events:
                        yield event
                return
            except Retry as retry:
                errors.append(retry.error)
            except TokenpipeError as refused:  # a 400: the request itself, not the replica
                if broke is None or progress.texts:
                    raise
                errors.append(refused)  # an upstream that refuses to go on with an answer
            except Broke as failed:
                done += progress.tokens
                going_on = self._going_on(prepared, progress, done)
                if going_on is None or len(self.replicas) == 1:
                    raise failed.error from None
                path, body = going_on
                if broke is None:
                    broke, errors = failed.error, []  # before it: tries at its beginning
                else:
                    errors.append(failed.error)
                log.info("%s; going on with the answer elsewhere after %d tokens (%d "
                         "characters), from its %s", failed.error.message, done,
                         sum(map(len, said)), "text" if "messages" in body or isinstance(
                             body.get("prompt"), str) else "token ids")
            finally:
                replica.in_flight -= 1
        if broke is not None:
            why = "; ".join(e.message for e in errors) or "no other upstream is healthy"
            raise EngineError(f"{broke.message}, and no other upstream could go on with "
                              f"the answer: {why}")
        raise self.replicas.give_up(errors)

    def _going_on(self, prepared: PreparedRequest, progress: Progress, done: int
                  ) -> tuple[str, dict[str, Any]] | None:
        """The request that continues an answer whose replica broke after `done` tokens
        (engines/prefill.py `continuation`), or None where that would not be the same
        answer: calls or a thinking section came, or text the engine does not pass on."""
        if not self.continue_answers or progress.calls is not None or progress.aside:
            return None
        text = "".join(progress.said)
        request = prepared.request
        if request.split_reasoning and THINK_OPEN in text:
            return None
        ids = progress.ids
        prompt = request.prompt_ids if request.prompt_ids is not None else ids.prompt
        exact = None
        if ids.whole and prompt is not None and len(ids.answer) == done:
            exact = from_ids(request, prompt, tuple(ids.answer), prepared.max_tokens - done)
        going_on = exact or continuation(request, text, prepared.max_tokens - done)
        if going_on is None:
            return None
        return body_of(PreparedRequest(going_on, prepared.prompt_text, (),
                                       prepared.max_tokens - done), self.model, going_on=True)

    async def _attempt(self, replica: Replica, path: str, body: dict[str, Any],
                       sent: http.Connection | None, progress: Progress
                       ) -> AsyncGenerator[EngineEvent, None]:
        """One upstream request (`sent`: already written there by begin()). Raises Retry
        for a failure before the first token, Broke for one after it."""
        origin = self._origins.get(replica.base)
        if not self._open or origin is None:
            if sent is not None:
                sent.close()
            raise EngineUnavailable("the openai engine is closed")
        decoder = http.SSEDecoder()
        conn: http.Connection | None = None
        try:
            # Up to the first token: nothing is passed on yet, so any failure may move on.
            try:
                async with asyncio.timeout(self.first_token_timeout_s):
                    conn = await origin.request(
                        "POST", path, encoded(body, replica), self._post_headers,
                        connect_timeout_s=min(CONNECT_TIMEOUT_S, self.first_token_timeout_s),
                        sent=sent)
                    if conn.status == 400 and not replica.refuses_token_ids:
                        said = await conn.read()
                        if b"return_token_ids" not in said:
                            raise refusal(replica, conn.status, said, conn.headers)
                        log.info("upstream %s refuses return_token_ids", replica.base)
                        replica.refuses_token_ids = True  # asked again without: moves as text
                        conn.release()
                        conn = await origin.request("POST", path, encoded(body, replica),
                                                    self._post_headers)
                    if conn.status != 200:
                        raise refusal(replica, conn.status, await conn.read(), conn.headers)
                    while not progress.texts and not progress.done:
                        raw = await conn.receive()
                        if raw is None:
                            raise Retry(EngineError(f"upstream {replica.base} closed the "
                                                     "stream before the first token"))
                        for sse in decoder.feed(raw):
                            handle_event(sse.data, progress, replica, streamed=False)
            except TimeoutError:
                raise Retry(EngineError(
                    f"upstream {replica.base} sent no token within the first-token timeout "
                    f"of {self.first_token_timeout_s:g} s")) from None
            except http.HTTPError as exc:
                replica.mark(False, f"upstream {replica.base} failed: {describe(exc)}")
                verb = "unreachable" if isinstance(exc, http.ConnectError) else "failed"
                raise Retry(EngineError(f"upstream {replica.base} {verb}: "
                                         f"{describe(exc)}")) from None
            # From here on the text is passed on: a failure breaks this answer here.
            while True:
                for event in progress.events:
                    yield event
                progress.events.clear()
                if progress.failure is not None:
                    raise Broke(progress.failure)
                if progress.done:
                    break
                try:
                    raw = await conn.receive(self.idle_timeout_s)
                except TimeoutError:
                    raise Broke(EngineError(f"upstream {replica.base} sent nothing for "
                                            f"{self.idle_timeout_s:g} s mid-answer")) from None
                except http.HTTPError as exc:
                    replica.mark(False, f"upstream {replica.base} failed: {describe(exc)}")
                    raise Broke(EngineError(
                        f"upstream {replica.base} failed mid-answer after {progress.texts} "
                        f"tokens: {describe(exc)}")) from None
                if raw is None:
                    if progress.finish is not None:
                        break  # no [DONE], but the answer itself was complete
                    replica.mark(False, f"upstream {replica.base} cut a stream")
                    raise Broke(EngineError(f"upstream {replica.base} closed the stream "
                                            f"mid-answer after {progress.texts} tokens"))
                for sse in decoder.feed(raw):
                    handle_event(sse.data, progress, replica, streamed=True)
            finished = finish_events(progress, replica)
            progress.complete = True
            for event in finished:
                yield event
        finally:
            if conn is not None:
                if progress.complete:
                    # Read the body's end so the connection goes back to the pool.
                    with contextlib.suppress(http.HTTPError, TimeoutError):
                        async with asyncio.timeout(DRAIN_TIMEOUT_S):
                            while await conn.receive() is not None:
                                pass
                conn.release()  # an unread answer closes the connection: upstream stops


@dataclasses.dataclass(slots=True)
class _Sent:
    """A request begin() wrote upstream, for its stream() to read the answer of."""

    prepared: PreparedRequest
    replica: Replica
    conn: http.Connection
    path: str
    body: dict[str, Any]

    def drop(self) -> None:
        """Never streamed: closing the connection is how the upstream learns to stop."""
        self.replica.in_flight -= 1
        self.conn.release()  # unanswered: closed, and a spare opened in its place
