"""Which models a server runs, each with its engine, file and options: from --model (one, or
NAME=[ENGINE:]SPEC repeated), else the configuration file's [models.NAME] tables; names of
the model stores resolved to files (models/catalog.py) before anything loads."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from .config import ENGINES, Settings, engine_kind, engine_option_list
from .config_file import ModelConfig
from .engines.base import EngineOptions
from .models import Places, resolve


@dataclass(frozen=True, slots=True)
class ModelPlan:
    name: str | None  # the model id clients see; None: the engine's default (from the file)
    engine: str
    spec: str | None  # a path, hub id or upstream URL(s); None: the engine's default model
    config: ModelConfig | None = None  # its [models.NAME] table, where the file has one
    # the SPEC of an engine whose capabilities name a spec_option, for that option (the
    # openai engine: its upstream's base URL(s)); spec is then the upstream's model name
    upstream: str | None = None
    # engine options whose value names a model (Option.names_model: --draft-model), each
    # (attr, file) as resolved
    files: tuple[tuple[str, str], ...] = ()


def _plan(name: str, engine: str, target: str | None, table: ModelConfig | None) -> ModelPlan:
    """A named model: for an engine with a spec_option (openai) its SPEC sets that option."""
    if engine_kind(engine).capabilities.spec_option:
        return ModelPlan(name, engine, None, table, upstream=target)
    return ModelPlan(name, engine, target, table)


def split_engine(rest: str) -> tuple[str | None, str]:
    """[ENGINE:]SPEC -> (engine or None, spec)."""
    engine, colon, target = rest.partition(":")
    return (engine, target) if colon and engine in ENGINES else (None, rest)


def plans(settings: Settings) -> list[ModelPlan]:
    """The served models, unresolved: flags and variables first, then the file's tables."""
    if settings.models:
        out = []
        for spec in settings.models:
            name, _, rest = spec.partition("=")
            engine, target = split_engine(rest)
            table = settings.model_config(name)
            out.append(_plan(name, engine or (table and table.engine) or settings.engine,
                             target or None, table))
        return out
    if settings.model is None and settings.model_configs:
        return [_plan(t.name, t.engine or settings.engine, t.source, t)
                for t in settings.model_configs]
    table = settings.model_config(settings.model_id)
    return [ModelPlan(settings.model_id, (table and table.engine) or settings.engine,
                      settings.model, table)]


def resolve_plans(settings: Settings, *, download: bool = True) -> tuple[ModelPlan, ...]:
    """plans() with store names (`ollama:llama3.2:1b`, `hf:org/repo`, `smollm2`) turned into
    files; raises ValueError (ModelNotFound) naming the candidates for a name that fits
    none or several. The transformers engine also takes hub ids: a name no store knows is
    left to it."""
    places = Places(environ=dict(os.environ), model_dirs=settings.model_dirs)
    out = []
    for plan in plans(settings):
        files = engine_kind(plan.engine).capabilities.model_files
        if files is None:
            out.append(plan)
            continue
        if plan.spec is not None:
            found = resolve(plan.spec, places, download=download, strict=files == "gguf")
            if found is not None:
                plan = dataclasses.replace(plan, spec=str(found.path),
                                           name=plan.name or found.name)
        out.append(_resolve_options(settings, plan, places, download))
    for plan in out:
        engine_options(settings, plan)  # a template file that cannot be read fails now
    return tuple(out)


def _resolve_options(settings: Settings, plan: ModelPlan, places: Places,
                     download: bool) -> ModelPlan:
    """The plan with its engine's options that name a model (--draft-model) resolved to
    files as its own model is."""
    values = engine_options(settings, plan)
    files = []
    for option in engine_kind(plan.engine).options:
        name = values.get(option.field) if option.names_model else None
        if name:
            found = resolve(str(name), places, download=download)
            if found is not None:
                files.append((option.field, str(found.path)))
    return dataclasses.replace(plan, files=tuple(files))


def engine_options(settings: Settings, plan: ModelPlan) -> EngineOptions:
    """The settings' options with the plan's model and its table's keys in place."""
    base = settings.engine_options()
    t = plan.config or ModelConfig(name=plan.name or "")
    template = t.chat_template or settings.chat_template
    caps = engine_kind(plan.engine).capabilities
    if caps.spec_option:  # the SPEC names the upstream, which renders its own prompts
        if t.chat_template:
            raise ValueError(f"models.{t.name}.chat_template: the {plan.engine} engine's "
                             "upstream renders its own prompts")
        option = next(o for o in engine_option_list() if o.name == caps.spec_option)
        return dataclasses.replace(base, model=plan.spec, model_id=plan.name).with_values(
            **{option.field: plan.upstream or base.get(option.field)})
    table = {o.field: t.engine_key(o.model_key) for o in engine_option_list()
             if o.model_key and t.engine_key(o.model_key) is not None}
    return dataclasses.replace(
        base, model=plan.spec, model_id=plan.name,
        context_size=t.context or base.context_size, parallel=t.parallel or base.parallel,
        threads=t.threads or base.threads,
        chat_template=read_template(template) if caps.renders_prompts else None,
    ).with_values(**table, **dict(plan.files))


def read_template(path: str | None) -> str | None:
    """A chat template file's text, checked as Jinja where jinja2 is installed (both local
    engines bring it), so that a broken template fails at start, not at the first chat."""
    if path is None:
        return None
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"chat template {path}: cannot read it: {exc}") from None
    try:
        import jinja2
    except ImportError:
        return text
    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template {path}:{exc.lineno}: {exc.message}") from None
    return text
