"""The configuration file (`--config tokenpipe.toml`): server keys named as the flags are
(`ctx_size` for --ctx-size) and a `[models.NAME]` table per model. Checked here, every key
and type; an error names the key and its line (tomllib reports lines only for syntax, so the
line is found by scanning the text for the key under its table)."""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Sampling defaults a model table may set, with their TOML types.
SAMPLING: dict[str, str] = {
    "temperature": "float", "top_p": "float", "top_k": "int", "min_p": "float",
    "repetition_penalty": "float", "presence_penalty": "float",
    "frequency_penalty": "float", "seed": "int", "stop": "tuple", "max_tokens": "int",
    "parallel_tool_calls": "bool",  # a request default too, though not a sampling one
}
# The core's ranges (tokenpipe.v1's), so a table cannot set what no request may: (low, high,
# low excluded)
RANGES: dict[str, tuple[float, float, bool]] = {
    "temperature": (0, 2, False), "top_p": (0, 1, True), "top_k": (0, 2**31 - 1, False),
    "min_p": (0, 1, False), "repetition_penalty": (0, 2, True),
    "presence_penalty": (-2, 2, False), "frequency_penalty": (-2, 2, False),
    "seed": (0, 2**63 - 1, False), "max_tokens": (1, 2**31 - 1, False),
}
MAX_STOP, MAX_STOP_CHARS = 16, 256  # as every door takes stop strings
# The keys every model table takes; engines declare more (config.model_keys()).
MODEL_KEYS: dict[str, str] = {
    "engine": "str", "source": "str", "context": "int", "parallel": "int", "threads": "int",
    "chat_template": "str", "keep_alive": "duration", **SAMPLING,
}
NOT_IN_FILE = frozenset({"models", "model_configs", "plans"})  # [models] tables instead
Duration = float  # seconds; given as a number or "5m", "1h30m", "-1" (parse_duration)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class ConfigError(ValueError):
    """A configuration file's mistake: the file, the line where known, the key, what is wrong."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A `[models.NAME]` table. `keep_alive_s` is parsed and kept for loading on demand
    (not acted on yet); None where the table leaves a key out."""

    name: str
    engine: str | None = None
    source: str | None = None
    context: int | None = None
    parallel: int | None = None
    threads: int | None = None
    chat_template: str | None = None  # a file holding a Jinja chat template
    keep_alive_s: float | None = None  # < 0: forever
    sampling: tuple[tuple[str, Any], ...] = ()  # (key, value) defaults, in SAMPLING
    engine_keys: tuple[tuple[str, Any], ...] = ()  # (key, value) of engines' declared keys

    def default(self, key: str) -> Any:
        return dict(self.sampling).get(key)

    def engine_key(self, key: str) -> Any:
        """An engine option the table sets (its model_key, engines/kind.py), else None."""
        return dict(self.engine_keys).get(key)


def load(path: str | Path, setting_types: Mapping[str, str],
         engine_keys: Mapping[str, str] | None = None
         ) -> tuple[dict[str, Any], tuple[ModelConfig, ...]]:
    """(server settings by name, model tables in file order) from the file at `path`;
    `setting_types` maps each setting to its type's text, `engine_keys` each key a model
    table may set for an engine (config.model_keys())."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read the configuration: {exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    where = _Where(file, text)
    settings: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "models":
            continue
        kind = setting_types.get(key)
        if kind is None or key in NOT_IN_FILE:
            raise where.error((), key, "unknown key" + _suggest(key, setting_types))
        settings[key] = where.check((), key, value, kind)
    tables = doc.get("models", {})
    if not isinstance(tables, dict):
        raise where.error((), "models", "must be tables: [models.NAME]")
    keys = {**MODEL_KEYS, **(engine_keys or {})}
    models = tuple(_model(name, table, where, keys) for name, table in tables.items())
    return settings, models


def _model(name: str, table: Any, where: _Where, keys: Mapping[str, str]) -> ModelConfig:
    if not isinstance(table, dict):
        raise where.error(("models",), name, "must be a table: [models.NAME]")
    values: dict[str, Any] = {}
    sampling: list[tuple[str, Any]] = []
    engine: list[tuple[str, Any]] = []
    for key, value in table.items():
        kind = keys.get(key)
        if kind is None:
            raise where.error(("models", name), key, "unknown key in a model table"
                              + _suggest(key, keys))
        checked = where.check(("models", name), key, value, kind)
        if key in SAMPLING:
            problem = _out_of_range(key, checked)
            if problem:
                raise where.error(("models", name), key, problem)
            sampling.append((key, checked))
        elif key == "keep_alive":
            values["keep_alive_s"] = checked
        elif key in MODEL_KEYS:
            values[key] = checked
        else:
            engine.append((key, checked))
    return ModelConfig(name=name, sampling=tuple(sampling), engine_keys=tuple(engine),
                       **values)


def _out_of_range(key: str, value: Any) -> str | None:
    """What is wrong with a sampling default's value, or None."""
    if key == "stop":
        if len(value) > MAX_STOP or not all(0 < len(s) <= MAX_STOP_CHARS for s in value):
            return (f"expected at most {MAX_STOP} strings of 1 to {MAX_STOP_CHARS} "
                    f"characters, got {_shown(list(value))}")
        return None
    if key not in RANGES:
        return None
    low, high, open_low = RANGES[key]
    if (low < value <= high) if open_low else (low <= value <= high):
        return None
    wanted = f"more than {low} and at most {high}" if open_low else f"{low} to {high}"
    return f"expected {wanted}, got {value!r}"


def parse_duration(value: Any) -> float:
    """Seconds from a number or Ollama's strings ("5m", "1h30m", "90s", "-1"); < 0: forever."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+(\.\d+)?", text):  # plain seconds, as Ollama takes them
            return float(text)
        parts = _DURATION.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
            return sum(float(n) * scale[u] for n, u in parts)
    raise ValueError("a duration: seconds, or a string like \"5m\", \"1h30m\", \"-1\"")


class _Where:
    def __init__(self, file: Path, text: str) -> None:
        self.file, self.lines = file, text.splitlines()

    def check(self, table: tuple[str, ...], key: str, value: Any, kind: str) -> Any:
        try:
            return _typed(value, kind)
        except ValueError as exc:
            raise self.error(table, key, f"expected {exc}, got {_shown(value)}") from None

    def error(self, table: tuple[str, ...], key: str, what: str) -> ConfigError:
        line = self.line_of(table, key)
        dotted = ".".join((*table, key))
        at = f":{line}" if line else ""
        return ConfigError(f"{self.file}{at}: {dotted}: {what}")

    def line_of(self, table: tuple[str, ...], key: str) -> int | None:
        """The 1-based line where `key` is set under [table]; a table's own header line for
        a table; else the first line that sets the key anywhere."""
        k = re.escape(key)
        assign = re.compile(rf"""^\s*(?:{k}|"{k}"|'{k}')\s*=""")
        current: tuple[str, ...] = ()
        fallback = None
        for number, line in enumerate(self.lines, 1):
            header = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+", line)
            if header:
                current = tuple(p.strip().strip("\"'") for p in header.group(1).split("."))
                if current == (*table, key):
                    return number
                continue
            if assign.match(line):
                if current == table:
                    return number
                fallback = fallback or number
        return fallback


def _typed(value: Any, kind: str) -> Any:
    """`value` as a field of type text `kind` wants it; ValueError naming the type."""
    optional = "None" in kind
    if kind.startswith("tuple"):
        if isinstance(value, str):
            return tuple(s.strip() for s in value.split(",") if s.strip())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError("a list of strings")
    if kind in ("duration", "Duration"):
        return parse_duration(value)
    if kind.startswith("int"):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError("an integer" + (" (or leave it out)" if optional else ""))
    if kind.startswith("float"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ValueError("a number")
    if kind.startswith("bool"):
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if isinstance(value, str):
        return value
    raise ValueError("a string")


def _shown(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    return f"{names.get(type(value), type(value).__name__)} ({value!r})"[:120]


def _suggest(key: str, known: Mapping[str, str]) -> str:
    close = difflib.get_close_matches(key, [k for k in known if k not in NOT_IN_FILE], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

