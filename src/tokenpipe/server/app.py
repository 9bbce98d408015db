"""create_app(settings): the FastAPI application, its lifespan and its routes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount
from starlette.types import Scope

from .. import __version__
from ..config import Settings, engine_makers
from ..engines.base import Engine
from ..logs import setup_logging
from ..scheduler import Scheduler
from .connection_caps import ConnectionCaps, open_fds, raise_fd_limit, throttle_accept_errors
from .doors import DOORS, Door, api_labels, door_at, mount_order, resolve
from .model_slots import ModelSlot
from .openai.lean import unparsable
from .requests import catch_all
from .runtime import Runtime
from .security import RequireKey
from .uvicorn.flow import KeepRawSend
from .uvicorn.http import guarded_http
from .uvicorn.websocket import TokenpipeWebSocketProtocol

log = logging.getLogger("tokenpipe.server")
STATIC = Path(__file__).with_name("static")

_NO_UI = """<!doctype html><meta charset="utf-8"><title>tokenpipe</title>
<h1>tokenpipe</h1><p>The server runs; the web UI was not built. Run the README's set-up
command (it builds <code>web/</code> with npm), or connect to <code>/ws</code>.</p>"""


class UIFiles(StaticFiles):
    """The built web UI; looked up per request, so a UI built after start is served."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if scope["method"] not in ("GET", "HEAD"):
            # What a client that POSTs to a path of another API (/api/chat) must hear: the
            # path is unknown here, not "use another method". A path that exists (a page,
            # a route asked with a method it lacks) is 405. The app's handler words both.
            if self._exists(path) or _route_exists(scope):
                raise StarletteHTTPException(405, headers={"Allow": "GET, HEAD"})
            raise StarletteHTTPException(404)
        if not (STATIC / "index.html").is_file():
            if path in ("", ".", "index.html"):
                return HTMLResponse(_NO_UI)
            return PlainTextResponse("Not Found", status_code=404)
        return await super().get_response(path, scope)

    async def check_config(self) -> None:
        if STATIC.is_dir():  # no UI built: get_response explains, instead of a 500
            await super().check_config()

    def _exists(self, path: str) -> bool:
        if path in ("", "."):
            return True
        _, found = self.lookup_path(path)
        return found is not None

    def serves(self, path: str) -> bool:
        """A GET of `path` is the page: its root or one of its files (read per request)."""
        if path in ("/", "/index.html"):
            return True
        return STATIC.is_dir() and self._exists(path.lstrip("/"))


def _route_exists(scope: Scope) -> bool:
    """Some route other than a mount serves this path, with another method."""
    router = getattr(scope.get("app"), "router", None)
    for route in getattr(router, "routes", ()):
        if not isinstance(route, Mount) and route.matches(scope)[0] is not Match.NONE:
            return True
    return False


def create_app(settings: Settings | None = None, engine: Engine | None = None,
               doors: Sequence[Door] = DOORS) -> FastAPI:
    """The app; `engine` may be given pre-built (tests), else it is built from settings;
    `doors`: the APIs it serves (doors.py), each mounted, guarded and counted alike."""
    settings = settings or Settings()
    runtime = Runtime(settings)
    runtime.models.apis = api_labels(doors)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        throttle_accept_errors(asyncio.get_running_loop())
        loader = asyncio.create_task(_load(runtime, engine))
        try:
            yield
        finally:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
            await _shutdown(runtime)

    app = FastAPI(title="tokenpipe", version=__version__, lifespan=lifespan,
                  summary="Stream a local LLM's answer token by token.")
    app.state.runtime = runtime
    app.state.doors = doors
    mount(app, doors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """On a door's paths every error has the door's shape, also those Starlette raises
        itself (a body that is not JSON, a path that does not match)."""
        door = door_at(request.url.path, doors)
        if door is None:
            return await http_exception_handler(request, exc)
        body = door.error(exc.status_code, _parse_error(exc) or str(exc.detail))
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    # GET documented, HEAD alike but out of the schema: one route of both methods gives
    # the OpenAPI document one operation id twice (FastAPI warns on every /openapi.json)
    @app.head("/health", include_in_schema=False)
    @app.get("/health", tags=["health"])
    async def health() -> JSONResponse:
        """200 while at least one model can serve (loaded and healthy, or loadable on
        demand), else 503 (HEAD: no body), also while the start's loads run. `states` says
        each model's: available, loading, loaded or failed; `errors` why each model that
        cannot serve cannot; status `degraded` when some model cannot while another can, or
        the Responses store cannot write (or, shared in Redis, reach Redis: `store` says why)."""
        models = runtime.models
        body: dict[str, object] = {"status": "ok" if models.ready else "loading",
                                   "models": models.names, "states": models.states()}
        errors = models.errors()
        if errors:
            body["errors"] = errors
        error = models.load_error or models.failure
        if models.degraded:
            body.update(status="degraded", error=error)
        elif error:
            body.update(status="error", error=error)
        responses = getattr(app.state, "responses", None)  # set by its door's lifespan
        if responses is not None and responses.store.failure:
            body["store"] = responses.store.failure
            if body["status"] == "ok":
                body["status"] = "degraded"
        state = getattr(runtime.resumable, "failure", None)  # a shared store's last error
        if state:
            body["state"] = state
            if body["status"] == "ok":
                body["status"] = "degraded"
        return JSONResponse(body, status_code=200 if models.ready else 503)

    @app.head("/metrics", include_in_schema=False)
    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        """Prometheus metrics: generations, latency histograms, tokens, errors, connections."""
        return Response(generate_latest(runtime.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    page = UIFiles(directory=STATIC, html=True, check_dir=False)
    app.add_middleware(KeepRawSend)
    app.add_middleware(RequireKey, settings=settings, doors=doors, page=page.serves)

    app.mount("/", page, name="ui")

    return app


def mount(app: FastAPI, doors: Sequence[Door]) -> None:
    """Every door's routes, the fast ones (exact paths, served without FastAPI's handler)
    before all; then each door's, the longest prefix first, followed by its catch-all."""
    fast = {door.name: list(resolve(door.fast)) if door.fast else [] for door in doors}
    app.router.routes[:0] = [route for routes in fast.values() for route in routes]
    for door in mount_order(doors):
        routes = resolve(door.routes)
        if isinstance(routes, APIRouter):
            app.include_router(routes)
            routes = routes.routes  # with the router's prefix: what its 405s are read from
        else:
            app.router.routes.extend(routes)
        if door.catch_all:
            app.router.routes.extend(catch_all(door, [*fast[door.name], *routes]))


def _parse_error(exc: StarletteHTTPException) -> str | None:
    """FastAPI words every body its json.loads refused "There was an error parsing the
    body"; say why (nested too deeply, a number too long)."""
    cause = exc.__cause__
    if exc.status_code != 400 or not isinstance(cause, (RecursionError, ValueError)):
        return None
    return unparsable(cause)


async def _load(runtime: Runtime, engine: Engine | None) -> None:
    """The configured models, each a slot that loads on demand; at start the first
    --max-loaded-models of them (all by default) load, unless --load-on-demand."""
    settings = runtime.settings
    models = runtime.models
    try:
        makers: list[Callable[[], Engine]] = (
            [functools.partial(_given, engine)] if engine is not None
            else engine_makers(settings))
        for make in makers:
            name = make().info.model_id
            table = settings.model_config(name)
            keep = table.keep_alive_s if table and table.keep_alive_s is not None else None
            models.add(ModelSlot(name, make, functools.partial(_scheduler, runtime, name),
                                 settings.keep_alive if keep is None else keep))
    except Exception as exc:
        models.load_error = f"{type(exc).__name__}: {exc}"
        log.error("bad model configuration: %s", models.load_error)
        return
    models.max_loaded = settings.max_loaded_models
    models.clients_unload = settings.load_on_demand
    if settings.load_on_demand:
        log.info("models load on demand: %s", ", ".join(models.names))
        return
    first = models.names[:settings.max_loaded_models or None]
    await models.preload(first)


def _given(engine: Engine) -> Engine:
    return engine


def _scheduler(runtime: Runtime, name: str, engine: Engine) -> Scheduler:
    settings = runtime.settings
    return Scheduler(engine, max_queue=settings.max_queue,
                     default_max_tokens=settings.default_max_tokens_for(name),
                     max_prompt_tokens=settings.max_prompt_tokens, metrics=runtime.metrics,
                     sampling_defaults=settings.sampling_defaults_for(name))


async def _shutdown(runtime: Runtime) -> None:
    await runtime.models.aclose(runtime.settings.shutdown_grace_s)
    await runtime.close()
    await runtime.models.free()


class DrainingServer(uvicorn.Server):
    """uvicorn closes every WebSocket with 1012 the moment shutdown starts. Drain first:
    stop accepting, let running generations end (or fail with shutting_down) and send
    their final frames, then let uvicorn close what is left. A second SIGINT or SIGTERM
    means "exit now": the drain stops, every connection is cut off."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self.runtime = runtime

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:  # uvicorn forces only on a second SIGINT; SIGTERM too
            self.force_exit = True
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        drain = asyncio.ensure_future(self.runtime.drain())
        while not drain.done() and not self.force_exit:
            await asyncio.wait({drain}, timeout=0.1)
        if not drain.done():
            log.warning("second signal: exiting now")
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
            await self.runtime.stop_now()
        await super().shutdown(sockets)
        if self.force_exit:  # uvicorn skips the app's shutdown then; with nothing left
            # running it is quick, and it closes the engines (no task left to cancel noisily)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.lifespan.shutdown(), 5.0)


def run_server(settings: Settings, doors: Sequence[Door] = DOORS) -> None:
    app = create_app(settings, doors=doors)
    DrainingServer(server_config(settings, app), app.state.runtime).run()


def server_config(settings: Settings, app: FastAPI) -> uvicorn.Config:
    """uvicorn's configuration of a tokenpipe server: its hardened HTTP and WebSocket
    protocols, limits and caps, for the doors the app serves."""
    log_config = setup_logging(settings.log_level, settings.log_format,
                               secrets=(settings.api_key, settings.upstream_key))
    fd_limit = raise_fd_limit()  # the connection caps are fitted to it
    caps = ConnectionCaps.of(settings, fd_limit, open_fds())
    log.info("connections: at most %d open (%s per client address; open-file limit %d, "
             "backlog %d)", caps.total, caps.per_client or "no limit", fd_limit, caps.backlog)
    return uvicorn.Config(
        app,
        log_config=log_config,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        loop="asyncio",  # by name: an installed uvloop is not picked up untested
        # httptools (C parser; h11 cost the hop ~0.1 ms per request) with head and body
        # limits, deadlines, connection caps and the Host check (uvicorn/http.py)
        http=guarded_http(settings, caps, app.state.doors),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        backlog=caps.backlog,
        ws=TokenpipeWebSocketProtocol,  # websockets-sansio, hardened (uvicorn/websocket.py)
        ws_max_size=max(16 * 1024 * 1024, 4 * settings.max_message_bytes),
        ws_per_message_deflate=False,  # deltas are a few bytes: compressing costs, saves nothing
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )
