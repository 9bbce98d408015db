"""Settings (CLI flags, TOKENPIPE_* environment variables, the configuration file) and the
engine registry. Precedence: flag > environment > file > default."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config_file import Duration, ModelConfig, parse_duration, setting_types
from .config_file import load as load_file
from .engines.base import Engine, EngineOptions
from .errors import MissingDependency

if TYPE_CHECKING:
    from .model_plans import ModelPlan

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
    ctx_size: int | None = None  # None: the engine's default (docs/configuration.md)
    parallel: int = 8
    threads: int | None = None
    determinism: str = "exact"  # llamacpp: exact, serial or fast (docs/determinism.md)
    kv_cache: str = "tiered"  # llamacpp: tiered, shared or split (docs/configuration.md)
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
    max_n: int = 8  # most choices (`n`) one OpenAI request may ask for
    parallel_tool_calls: bool = False  # a request that does not say: one call per answer
    slow_client_timeout_s: float = 30.0
    resume_grace_s: float = 30.0
    shutdown_grace_s: float = 10.0
    sse_ping_interval_s: float = 15.0  # comment pings on idle OpenAI streams
    # stored Responses (/v1/responses): one SQLite file; None: responses_db_path()'s default
    responses_db: str | None = None
    responses_max_age_s: float = 30 * 86400.0  # older stored responses are forgotten
    responses_max_count: int = 10_000  # beyond it the oldest are forgotten
    responses_max_row_bytes: int = 8 * 2**20  # a response to store over it is a 400
    responses_max_bytes: int = 2 * 2**30  # the rows in all; beyond it the oldest are forgotten
    # background responses one client address may have running (also at most max_queue / 4)
    max_background_per_client: int = 16
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
    chat_template: str | None = None  # a Jinja template file, in place of the model's
    model_dirs: tuple[str, ...] = ()  # folders of GGUF files `tokenpipe models` lists
    # load on demand (docs/configuration.md): models load when first asked for, not at start
    load_on_demand: bool = False
    keep_alive: Duration = -1.0  # seconds an idle model stays loaded; < 0: forever
    max_loaded_models: int = 0  # models in memory at once (the LRU idle one goes); 0: any
    # from the configuration file's [models.NAME] tables; not flags nor variables
    model_configs: tuple[ModelConfig, ...] = ()
    plans: tuple[ModelPlan, ...] = ()  # the models to serve, names resolved (resolve_plans)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 file: dict[str, Any] | None = None, **overrides: Any) -> Settings:
        """Defaults, then the configuration file's values, then TOKENPIPE_<FIELD> variables,
        then explicit overrides (CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = dict(file or {})
        for f in dataclasses.fields(cls):
            raw = env.get("TOKENPIPE_" + f.name.upper())
            if raw is not None and raw != "" and f.name not in INTERNAL:
                values[f.name] = _parse(f.type, raw, f.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def load(cls, config: str | None = None, environ: Mapping[str, str] | None = None,
             **overrides: Any) -> Settings:
        """from_env() over the configuration file at `config` (else TOKENPIPE_CONFIG's)."""
        env = os.environ if environ is None else environ
        path = config or env.get("TOKENPIPE_CONFIG") or None
        if path is None:
            return cls.from_env(env, **overrides)
        values, tables = load_file(path, setting_types(cls))
        if tables and "model" in values:
            raise ValueError(f"{path}: give either model = ... or [models.NAME] tables")
        base = Path(path).expanduser().parent  # the file's relative paths are its own
        for key in ("chat_template", "model"):
            if isinstance(values.get(key), str) and (base / values[key]).exists():
                values[key] = str(base / values[key])
        if "model_dirs" in values:
            values["model_dirs"] = tuple(str(base / d) for d in values["model_dirs"])
        tables = tuple(dataclasses.replace(t, source=_near(base, t.source),
                                           chat_template=_near(base, t.chat_template))
                       for t in tables)
        return cls.from_env(env, file={**values, "model_configs": tables}, **overrides)

    def model_config(self, name: str | None) -> ModelConfig | None:
        return next((m for m in self.model_configs if m.name == name), None)

    def default_max_tokens_for(self, model_id: str) -> int:
        """max_tokens for a request that gives none: its model table's, else the server's."""
        table = self.model_config(model_id)
        value = table.default("max_tokens") if table else None
        return self.default_max_tokens if value is None else int(value)

    def sampling_defaults_for(self, model_id: str) -> dict[str, Any]:
        """Its model table's sampling keys (temperature, stop, ...), for the Scheduler."""
        table = self.model_config(model_id)
        return {"parallel_tool_calls": self.parallel_tool_calls,
                **(dict(table.sampling) if table else {})}

    def engine_options(self) -> EngineOptions:
        return EngineOptions(
            model=self.model,
            model_id=self.model_id,
            context_size=self.ctx_size,
            parallel=self.parallel,
            threads=self.threads,
            determinism=self.determinism,
            kv_cache=self.kv_cache,
            pace_ms=self.fake_pace_ms,
            device=self.device,
            upstream=self.upstream,
            upstream_key=self.upstream_key,
            upstream_first_token_timeout_s=self.upstream_first_token_timeout_s,
            upstream_idle_timeout_s=self.upstream_idle_timeout_s,
        )


INTERNAL = frozenset({"model_configs", "plans"})


def _near(base: Path, value: str | None) -> str | None:
    """A path the configuration file gives, relative to the file's folder when it is one."""
    return str(base / value) if value is not None and (base / value).exists() else value


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
        if text == "Duration":
            return parse_duration(raw)
        if text == "bool":
            if raw.strip().lower() in ("1", "true", "yes", "on"):
                return True
            if raw.strip().lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if "tuple" in text:
            return tuple(s.strip() for s in raw.split(",") if s.strip())
        if text.startswith("int"):
            return int(raw)
        if text.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"TOKENPIPE_{name.upper()}={raw!r} is not a valid "
                         f"{'duration' if text == 'Duration' else text}") from None
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


def engine_makers(settings: Settings) -> list[Callable[[], Engine]]:
    """One engine builder per model (each call a fresh, unloaded engine): the resolved
    plans, else --model NAME=SPEC (repeatable), the single model, or the configuration
    file's tables."""
    from .model_plans import engine_options, resolve_plans

    plans = settings.plans or resolve_plans(settings, download=False)
    makers: list[Callable[[], Engine]] = [
        functools.partial(engine_class(p.engine).from_options, engine_options(settings, p))
        for p in plans]
    names = [make().info.model_id for make in makers]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique: {names}")
    return makers


def build_engines(settings: Settings) -> list[Engine]:
    """One engine per model, unloaded (engine_makers)."""
    return [make() for make in engine_makers(settings)]
