"""Settings (CLI flags, TOKENPIPE_* environment variables, the configuration file) and the
engine registry. Precedence: flag > environment > file > default.

Settings' fields are the server's; each engine's own options are declared by its kind
(engines/kind.py) and live in `engine_values`, read as attributes (`settings.kv_cache`):
adding an engine adds one line to ENGINES and nothing here."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config_file import Duration, ModelConfig, parse_duration
from .config_file import load as load_file
from .engines.base import Engine, EngineOptions
from .engines.kind import EngineKind, Option
from .errors import MissingDependency

if TYPE_CHECKING:
    from .model_plans import ModelPlan

# Engine name -> "module:KIND", its declaration (engines/kind.py: light to import); the
# engine class it names is imported only when chosen (optional dependencies).
ENGINES: dict[str, str] = {
    "llamacpp": "tokenpipe.engines.llamacpp.kind:KIND",
    "transformers": "tokenpipe.engines.transformers.kind:KIND",
    "fake": "tokenpipe.engines.fake:KIND",
    "openai": "tokenpipe.engines.openai.kind:KIND",
}


def engine_kind(name: str) -> EngineKind:
    """The declaration registered under `name`."""
    try:
        target = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None
    module_name, _, attr = target.partition(":")
    kind: EngineKind = getattr(importlib.import_module(module_name), attr)
    return kind


def engine_option_list() -> list[Option]:
    """Every registered engine's options, in registry order; an option two engines declare
    (the same name) is listed once."""
    seen: dict[str, Option] = {}
    for name in ENGINES:
        for option in engine_kind(name).options:
            seen.setdefault(option.name, option)
    return list(seen.values())


class EngineValues(dict[str, Any]):
    """Engine options given by setting name (unset ones take their declared default); its
    repr leaves out secret ones (an upstream's API key)."""

    def __repr__(self) -> str:
        secret = {o.name for o in engine_option_list() if o.secret}
        return repr({k: ("***" if k in secret else v) for k, v in self.items()})


@dataclass(init=False)
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
    # where resumable streams are shared between replicas: None, this process alone;
    # redis://HOST:PORT/DB (server/state/redis_store.py)
    state: str | None = field(default=None, repr=False)  # a URL may hold a password
    state_prefix: str = "tokenpipe"  # the namespace of this deployment's keys
    # a stream's producer holds a lease this long (renewed every third of it): how soon a
    # replica that died is noticed, and how long a stall of its event loop may last
    state_lease_s: float = 3.0
    # HOST:PORT where the other replicas reach this one (a lease names it: a replica that
    # stopped is taken over at once); None: --host and --port (server/runtime.py)
    state_address: str | None = None
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
    # streams one client address may follow at once: background responses' GET streams and
    # resumable streams' GET /v1/streams (server/followers.py); 0: no cap
    max_followers_per_client: int = 32
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
    # every engine's own options by setting name (engine_option_list), where given
    engine_values: EngineValues = field(default_factory=EngineValues)

    def __init__(self, **values: Any) -> None:
        """Fields by name, and any engine's declared options by setting name (they go to
        engine_values); the dataclass' defaults for the rest."""
        engine = EngineValues(values.pop("engine_values", None) or {})
        own = {f.name: f for f in dataclasses.fields(self)}
        declared = {o.name for o in engine_option_list()}
        for key in [k for k in values if k not in own]:
            if key not in declared:
                raise TypeError(f"Settings() got an unexpected keyword argument {key!r}")
            engine[key] = values.pop(key)
        for name, f in own.items():
            if name == "engine_values":
                continue
            if name in values:
                value = values[name]
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                value = f.default
            setattr(self, name, value)
        self.engine_values = engine

    def __getattr__(self, name: str) -> Any:
        """An engine option by setting name: its value, else its declared default."""
        if name.startswith("__") or name == "engine_values":
            raise AttributeError(name)
        option = next((o for o in engine_option_list() if o.name == name), None)
        if option is None:
            raise AttributeError(f"Settings has no setting {name!r}")
        return self.__dict__.get("engine_values", {}).get(name, option.default)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 file: dict[str, Any] | None = None, **overrides: Any) -> Settings:
        """Defaults, then the configuration file's values, then TOKENPIPE_<FIELD> variables,
        then explicit overrides (CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = dict(file or {})
        for name, kind in setting_types().items():
            raw = env.get("TOKENPIPE_" + name.upper())
            if raw is not None and raw != "" and name not in INTERNAL:
                values[name] = _parse(kind, raw, name)
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
        values, tables = load_file(path, setting_types(), model_keys())
        if tables and "model" in values:
            raise ValueError(f"{path}: give either model = ... or [models.NAME] tables")
        base = Path(path).expanduser().parent  # the file's relative paths are its own
        named = [o for o in engine_option_list() if o.names_model]  # --draft-model
        for key in ("chat_template", "model", *(o.name for o in named)):
            if isinstance(values.get(key), str) and (base / values[key]).exists():
                values[key] = str(base / values[key])
        if "model_dirs" in values:
            values["model_dirs"] = tuple(str(base / d) for d in values["model_dirs"])
        keys = {o.model_key for o in named}
        tables = tuple(dataclasses.replace(
            t, source=_near(base, t.source), chat_template=_near(base, t.chat_template),
            engine_keys=tuple((k, _near(base, v) if k in keys and isinstance(v, str) else v)
                              for k, v in t.engine_keys))
            for t in tables)
        return cls.from_env(env, file={**values, "model_configs": tables}, **overrides)

    def secrets(self) -> tuple[str, ...]:
        """The keys to keep out of logs: --api-key and every engine option declared secret
        (the openai engine's --upstream-key), where set."""
        values = [self.api_key, *(self.engine_values.get(o.name)
                                  for o in engine_option_list() if o.secret)]
        return tuple(v for v in values if v)

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
        """The options of this server's engines: every declared engine option's value (by
        its attr), each engine reads its own."""
        return EngineOptions(
            model=self.model,
            model_id=self.model_id,
            context_size=self.ctx_size,
            parallel=self.parallel,
            threads=self.threads,
            values=tuple((o.field, self.engine_values.get(o.name, o.default))
                         for o in engine_option_list()),
        )


INTERNAL = frozenset({"model_configs", "plans", "engine_values"})


def setting_types() -> dict[str, str]:
    """Every setting (a field of Settings or an engine's option) -> its type's text."""
    types = {f.name: str(f.type) for f in dataclasses.fields(Settings)
             if f.name != "engine_values"}
    for option in engine_option_list():
        types.setdefault(option.name, option.type_text())
    return types


def model_keys() -> dict[str, str]:
    """The engine options a `[models.NAME]` table may set: table key -> type's text."""
    return {o.model_key: o.kind for o in engine_option_list() if o.model_key}


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
    kind = engine_kind(name)
    module_name, _, attr = kind.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except MissingDependency:
        raise
    except ImportError as exc:
        hint = kind.install_hint or f"pip install 'tokenpipe[{name}]'"
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
