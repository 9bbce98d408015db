"""What an engine declares about itself before anything heavy is imported: its options
(each one a flag, a TOKENPIPE_* variable and a configuration file key) and its capabilities
(what the model plans and the doors may count on). The CLI, the settings, the configuration
file and the model plans read these declarations; none of them names an engine.

A kind lives in a module of the engine's package that imports no optional dependency
(llama-cpp-python, torch), so `tokenpipe serve --help` and the configuration file work
whether or not an engine's extra is installed; the engine class carries it as `kind`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KINDS = ("str", "int", "float", "bool", "duration")  # an option's value, as config_file reads it


@dataclass(frozen=True, slots=True)
class Option:
    """One engine option. `name` is the setting (`--kv-cache`, TOKENPIPE_KV_CACHE, `kv_cache`
    in the configuration file); `attr` the name the engine reads it by from EngineOptions
    (default: name); `model_key` its key in a `[models.NAME]` table, where a model may set
    it alone; `names_model`: its value names a model, resolved as --model's is."""

    name: str
    kind: str  # one of KINDS
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    model_key: str | None = None
    attr: str | None = None
    secret: bool = False  # kept out of reprs and logs (an API key)
    metavar: str | None = None
    names_model: bool = False  # a model name resolved to a file as --model is (model_plans.py)

    @property
    def field(self) -> str:
        return self.attr or self.name

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def type_text(self) -> str:
        """The type as config_file and Settings spell it (None allowed where the default
        is None)."""
        text = {"duration": "Duration"}.get(self.kind, self.kind)
        return f"{text} | None" if self.default is None else text


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine can do, for the code that must know before or without loading it."""

    # The model it reads: "gguf" (a GGUF file: a name no model store knows is an error),
    # "any" (a GGUF file, a HF folder or hub id: an unknown name is left to the engine), or
    # None (no model file: the engine's own, or an upstream's).
    model_files: str | None = None
    # The option that the SPEC of `--model NAME=ENGINE:SPEC` (and a table's `source`) sets
    # in place of the model (the openai engine: its upstream URLs); None: the model.
    spec_option: str | None = None
    # It renders prompts with a chat template of its own choosing (--chat-template applies);
    # False: someone else renders them (an upstream server).
    renders_prompts: bool = True
    # It enforces output grammars (response formats, tool calls): Ollama's "tools".
    constrains: bool = False


@dataclass(frozen=True, slots=True)
class EngineKind:
    """An engine as the registry knows it: `target` ("module:Class") is imported only when
    the engine is chosen."""

    name: str
    target: str
    options: tuple[Option, ...] = ()
    capabilities: Capabilities = Capabilities()
    install_hint: str | None = None  # how to install its extra; None: tokenpipe[NAME]

    def option(self, name: str) -> Option | None:
        """The option of that name (setting name or attr), or None."""
        return next((o for o in self.options if name in (o.name, o.field)), None)

    def read(self, values: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        """This kind's options by attr, from EngineOptions.values (any engine's (attr,
        value) pairs): the value given, else the declared default."""
        given = dict(values)
        return {o.field: given.get(o.field, o.default) for o in self.options}
