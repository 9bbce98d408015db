"""An answer with several calls ends when the model repeats one: a small model allowed more
than one call often writes the same call again and again until max_tokens (issue 30). The
grammar cannot say "not a call already made", so the stream says it: a call of a function
already called is held back until its arguments are whole; if they equal (as JSON) those of
an earlier call of the same function, it is dropped and the answer ends there (finish
reason tool_calls); otherwise it is released whole. Calls of a new function stream as they
are written."""

from __future__ import annotations

import json
from typing import Any

from ..types import GenerationRequest, Part
from .tools import several_calls

_UNSET = object()


def repeated_calls(request: GenerationRequest) -> RepeatedCalls | None:
    """The filter for an answer that may hold several calls; None where it may not."""
    return RepeatedCalls() if request.tools and several_calls(request.tool_choice) else None


class RepeatedCalls:
    """Filters an answer's pieces (content strings and Parts, in order). `repeated` turns
    true when the model began a call it had already made: nothing after it is passed on."""

    def __init__(self) -> None:
        self.repeated = False
        self._made: list[tuple[str, Any]] = []  # (name, parsed arguments) of whole calls
        self._name: str | None = None
        self._args = ""
        self._held: list[Part] | None = None  # the current call's parts while it is held

    def feed(self, pieces: list[Any]) -> list[Any]:
        out: list[Any] = []
        for piece in pieces:
            if self.repeated:
                break
            if not (isinstance(piece, Part) and piece.channel == "tool_call"):
                out.append(piece)
            elif piece.name is not None:  # a call begins
                self._end_call()
                self._name, self._args = piece.name, piece.text
                seen = any(name == piece.name for name, _ in self._made)
                self._held = [piece] if seen else None
                if not seen:
                    out.append(piece)
            else:
                self._args += piece.text
                if self._held is None:
                    out.append(piece)
                    continue
                self._held.append(piece)
                args = _parsed(self._args)
                if args is _UNSET:
                    continue  # not whole yet
                if (self._name, args) in self._made:
                    self.repeated, self._held, self._name = True, None, None
                else:
                    out.extend(self._held)
                    self._held = None
        return out

    def flush(self) -> list[Any]:
        """At the end: a held call cut short (max_tokens) is passed on as it was written."""
        held, self._held = self._held or [], None
        self._end_call()
        return list(held)

    def _end_call(self) -> None:
        if self._name is not None:
            args = _parsed(self._args)
            if args is not _UNSET:
                self._made.append((self._name, args))
        self._name, self._args = None, ""


def _parsed(text: str) -> Any:
    """The arguments as JSON once they are whole (an object's text parses only then)."""
    if not text.rstrip().endswith("}"):
        return _UNSET
    try:
        return json.loads(text)
    except ValueError:
        return _UNSET
