"""Settings (CLI flags and TOKENPIPE_* environment variables) and the engine registry."""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from .engines.base import Engine, EngineOptions
from .errors import MissingDependency

# Engine name -> "module:Class", imported only when chosen (optional dependencies).
ENGINES: dict[str, str] = {
    "llamacpp": "tokenpipe.engines.llamacpp:LlamaCppEngine",
    "transformers": "tokenpipe.engines.transformers:TransformersEngine",
    "fake": "tokenpipe.engines.fake:FakeEngine",
    "openai": "tokenpipe.engines.openai.engine:OpenAIEngine",
}
INSTALL_HINTS: dict[str, str] = {
    "llamacpp": "pip install 'tokenpipe[llamacpp]'",
    "transformers": "pip install 'tokenpipe[transformers]' (CPU torch: pip install torch==2.13.0)",
}


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "llamacpp"
    model: str | None = None
    model_id: str | None = None
    models: tuple[str, ...] = ()  # several models: NAME=[ENGINE:]SPEC each
    ctx_size: int = 8192
    parallel: int = 8
    threads: int | None = None
    determinism: str = "exact"  # llamacpp: exact, serial or fast (docs/determinism.md)
    device: str | None = None
    fake_pace_ms: float = 0.0
    upstream: str | None = None  # openai engine: base URL(s), comma-separated replicas
    upstream_key: str | None = field(default=None, repr=False)
    upstream_first_token_timeout_s: float = 60.0
    upstream_idle_timeout_s: float = 30.0
    default_max_tokens: int = 512
    max_queue: int = 64
    max_message_bytes: int = 1 << 20
    max_streams_per_connection: int = 16
    max_frames_per_second: float = 100.0
    max_connections_per_client: int = 256
    max_prompt_tokens: int | None = None  # default: what the context allows
    slow_client_timeout_s: float = 30.0
    resume_grace_s: float = 30.0
    shutdown_grace_s: float = 10.0
    sse_ping_interval_s: float = 15.0  # comment pings on idle OpenAI streams
    # stored Responses (/v1/responses): one SQLite file; None: responses_db_path()'s default
    responses_db: str | None = None
    responses_max_age_s: float = 30 * 86400.0  # older stored responses are forgotten
    responses_max_count: int = 10_000  # beyond it the oldest are forgotten
    api_key: str | None = field(default=None, repr=False)
    allowed_origins: tuple[str, ...] = ()
    # HTTP limits against hostile clients (docs/security.md)
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides loopback ones; "*": any
    max_body_bytes: int | None = None  # default: max_message_bytes, as a WebSocket frame
    max_header_bytes: int = 32 * 1024  # request line and headers together
    max_headers: int = 100
    header_timeout_s: float = 10.0  # the request head must arrive within this
    body_timeout_s: float = 30.0  # the request body must arrive within this
    keep_alive_timeout_s: int = 5  # an idle keep-alive connection is closed after this
    max_tcp_connections: int = 4096  # all open connections; lowered to fit the fd limit
    max_tcp_connections_per_client: int = 512  # per client address, WebSockets included
    log_level: str = "info"
    log_format: str = "text"
    flood_close_s: float = 3.0  # /ws: over the frame budget every second this long: 1008

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then TOKENPIPE_<FIELD> variables, then explicit overrides (CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get("TOKENPIPE_" + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f.type, raw, f.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def engine_options(self) -> EngineOptions:
        return EngineOptions(
            model=self.model,
            model_id=self.model_id,
            context_size=self.ctx_size,
            parallel=self.parallel,
            threads=self.threads,
            determinism=self.determinism,
            pace_ms=self.fake_pace_ms,
            device=self.device,
            upstream=self.upstream,
            upstream_key=self.upstream_key,
            upstream_first_token_timeout_s=self.upstream_first_token_timeout_s,
            upstream_idle_timeout_s=self.upstream_idle_timeout_s,
        )


def responses_db_path(settings: Settings) -> str:
    """Where stored responses live: the setting, else the user's data directory
    ($XDG_DATA_HOME, or ~/.local/share)/tokenpipe/responses.sqlite3."""
    if settings.responses_db:
        return settings.responses_db
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(base, "tokenpipe", "responses.sqlite3")


def _parse(kind: Any, raw: str, name: str) -> Any:
    text = str(kind)
    try:
        if "tuple" in text:
            return tuple(s.strip() for s in raw.split(",") if s.strip())
        if text.startswith("int"):
            return int(raw)
        if text.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"TOKENPIPE_{name.upper()}={raw!r} is not a valid {text}") from None
    return raw


def engine_class(name: str) -> type[Engine]:
    """The engine class registered under `name`; a missing extra is a one-line hint."""
    try:
        target = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except MissingDependency:
        raise
    except ImportError as exc:
        hint = INSTALL_HINTS.get(name, f"pip install 'tokenpipe[{name}]'")
        raise MissingDependency(f"engine {name!r} needs {exc.name or exc}: {hint}") from None
    cls: type[Engine] = getattr(module, attr)
    return cls


def build_engine(settings: Settings) -> Engine:
    return engine_class(settings.engine).from_options(settings.engine_options())


def parse_model_spec(spec: str, default_engine: str) -> tuple[str, str, str]:
    """NAME=[ENGINE:]SPEC -> (name, engine, spec). SPEC is a path or hub id, or for the
    openai engine the upstream base URL(s), comma-separated."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--model {spec!r}: expected NAME=[ENGINE:]SPEC, e.g. "
                         "small=llamacpp:/models/a.gguf or big=openai:http://gpu:8000")
    engine, colon, target = rest.partition(":")
    if colon and engine in ENGINES:
        return name, engine, target
    return name, default_engine, rest


def build_engines(settings: Settings) -> list[Engine]:
    """One engine per model: --model given as NAME=SPEC (repeatable), else the single one."""
    if not settings.models:
        return [build_engine(settings)]
    engines: list[Engine] = []
    for spec in settings.models:
        name, engine, target = parse_model_spec(spec, settings.engine)
        base = settings.engine_options()
        if engine == "openai":
            options = dataclasses.replace(base, model=None, model_id=name, upstream=target)
        else:
            options = dataclasses.replace(base, model=target or None, model_id=name)
        engines.append(engine_class(engine).from_options(options))
    names = [e.info.model_id for e in engines]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique: {names}")
    return engines
