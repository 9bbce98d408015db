"""Ollama's model names (`name:tag`, `latest` when the tag is left out) to a served model.

Ollama clients send what `ollama pull` would name a model (`smollm2`, `smollm2:135m`,
`smollm2:latest`); this server serves names such as `SmolLM2-135M-Instruct`. A name maps
when exactly one served model fits it:

- the served name itself, or it with `:latest`;
- else, ignoring case: the name part is the served name or its start up to a `-`, `_` or
  `.` (`smollm2` fits `SmolLM2-135M-Instruct`), and a tag other than `latest` is one of the
  words of the rest (`135m` fits, `360m` does not).

Two served models that both fit make the name ambiguous: it maps to none (the door says
"not found" and names the candidates).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

LATEST = "latest"
_WORDS = re.compile(r"[-_.]")


def listed(served: str) -> str:
    """A served model as /api/tags lists it: with a tag, as Ollama lists every model."""
    return served if ":" in served else f"{served}:{LATEST}"


def fits(requested: str, served: str) -> bool:
    name, _, tag = requested.partition(":")
    name, tag, lower = name.lower(), tag.lower() or LATEST, served.lower()
    if not name or not lower.startswith(name):
        return False
    rest = lower[len(name):]
    if rest and not _WORDS.match(rest):
        return False  # `smol` is not a word of `smollm2-...`
    return tag == LATEST or tag in _WORDS.split(rest)


def matches(requested: str, served: Sequence[str]) -> list[str]:
    """The served models `requested` may mean: one exact match, else every one it fits."""
    for name in served:
        if requested in (name, listed(name)):
            return [name]
    return [name for name in served if fits(requested, name)]


def resolve(requested: str, served: Sequence[str]) -> str | None:
    """The one served model `requested` means, or None (unknown or ambiguous)."""
    found = matches(requested, served)
    return found[0] if len(found) == 1 else None
