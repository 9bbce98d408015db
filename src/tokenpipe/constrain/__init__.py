"""Constrained decoding: what the answer must be (an OutputFormat) becomes a grammar
(grammars.py), and a grammar becomes one token mask per step for an engine's vocabulary
(guide.py). One library, llguidance, for both local engines: docs/structured-output.md says
why (cost per token, JSON Schema coverage) and what each format promises."""

from .grammars import grammar_for, grammar_of
from .guide import Guide, Guides, check_request
from .vocabularies import OnFirstUse, hf_view, llamacpp_view

__all__ = ["Guide", "Guides", "OnFirstUse", "check_request", "grammar_for", "grammar_of",
           "hf_view", "llamacpp_view"]
