"""A model's sampling defaults (its `[models.NAME]` table): where a request leaves a field out,
the table's value replaces the door's own default. Each door names the fields its client gave
(SamplingParams.given, from given()); the Scheduler merges once, with with_defaults()."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from .constrain.tools import resolved_choice
from .types import GenerationRequest, SamplingParams

# What a table may default here; max_tokens is the Scheduler's default_max_tokens already.
FIELDS = frozenset({"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                    "presence_penalty", "frequency_penalty", "seed", "stop"})


def given(body: BaseModel, names: Mapping[str, str] | Iterable[str]) -> frozenset[str]:
    """The SamplingParams fields a client set in `body`: `names` maps the door's field names
    to the core's (or lists names both share). An explicit null is no value: a default."""
    pairs = names.items() if isinstance(names, Mapping) else ((n, n) for n in names)
    return frozenset(core for field, core in pairs
                     if field in body.model_fields_set and getattr(body, field) is not None)


def with_defaults(params: SamplingParams, defaults: Mapping[str, Any]) -> SamplingParams:
    """`params` with each default the client did not give; the same object when none apply."""
    updates = {k: v for k, v in defaults.items() if k in FIELDS and k not in params.given}
    if "stop" in updates:
        updates["stop"] = tuple(updates["stop"])
    if updates.get("seed") is not None:
        updates["seed"] %= 2**63  # as the OpenAI door takes a seed
    return dataclasses.replace(params, **updates) if updates else params


def applied(request: GenerationRequest, defaults: Mapping[str, Any]) -> GenerationRequest:
    """`request` with its model's defaults: sampling (with_defaults) and how many calls an
    answer may hold (`parallel_tool_calls`, the server's setting or the model table's)."""
    params = with_defaults(request.params, defaults)
    choice = resolved_choice(request.tool_choice, bool(defaults.get("parallel_tool_calls")))
    if params is request.params and choice is request.tool_choice:
        return request
    return dataclasses.replace(request, params=params, tool_choice=choice)
