"""An upstream's streamed tool calls, re-streamed well-formed (sans-IO).

Upstreams differ in how they stream a call: OpenAI sends `index`, `id`, `type` and the
name in the first delta and argument fragments after; others send a call's whole
arguments in one delta, the `id` only once (or never), the arguments before the name,
several calls in one chunk, or indexes with gaps (1, 3) or none at all. `CallAssembler`
turns any of these into tokenpipe Parts with the guarantees the local engines give: each
call's first Part carries its dense index (0, 1, ... in the order the calls began), its
id (the upstream's, else one of ours) and its name; later Parts carry argument fragments
of that index; and `finish()` checks that every call is whole (a name, arguments that
parse as a JSON object) before the answer may end with `tool_calls`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...constrain.tools import new_call_id
from ...errors import EngineError
from ...types import Part


@dataclass(slots=True)
class _Call:
    index: int  # dense, ours
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # arguments that came before the name
    begun: bool = False  # its first Part (id, name) is out


class CallAssembler:
    """One answer's calls. `feed` takes a chunk's `delta.tool_calls` (or a legacy
    `delta.function_call`) and returns the Parts to pass on now."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._calls: list[_Call] = []
        self._by_key: dict[Any, _Call] = {}

    @property
    def calls(self) -> int:
        return len(self._calls)

    def feed(self, deltas: Any) -> list[Part]:
        if isinstance(deltas, dict):  # one call, not in a list (legacy function_call)
            deltas = [deltas]
        if not isinstance(deltas, list):
            raise EngineError(f"upstream {self._upstream} sent tool_calls that are not a "
                              f"list: {json.dumps(deltas)[:200]}")
        out: list[Part] = []
        for delta in deltas:
            if not isinstance(delta, dict):
                raise EngineError(f"upstream {self._upstream} sent a tool call delta that "
                                  f"is not an object: {json.dumps(delta)[:200]}")
            call = self._call_for(delta)
            function = delta.get("function", delta)  # legacy function_call: at the top
            function = function if isinstance(function, dict) else {}
            name, args = function.get("name"), function.get("arguments")
            if isinstance(name, str) and name and not call.begun and name != call.name:
                call.name += name  # a name split across deltas is joined until args come
            if isinstance(args, dict):  # a server that sends the arguments parsed
                args = json.dumps(args, ensure_ascii=False)
            if isinstance(args, str) and args:
                if call.begun:
                    call.arguments.append(args)
                    out.append(Part(args, "tool_call", call.index))
                else:
                    call.held.append(args)
                    if call.name:
                        out.extend(self._begin(call))
        return out

    def finish(self, *, whole: bool) -> list[Part]:
        """The Parts still held; with `whole` (the answer ended, not cut by max_tokens)
        every call must be complete: else EngineError naming the call."""
        out: list[Part] = []
        for call in self._calls:
            if not call.name:
                if whole:
                    raise EngineError(f"upstream {self._upstream} sent tool call "
                                      f"{call.index} without a function name")
                continue  # cut before its name: no call had begun
            if whole and not call.arguments and not "".join(call.held):
                call.held = ["{}"]  # a call of no arguments, sent as ""
            if not call.begun:
                out.extend(self._begin(call))
            elif call.held:
                held, call.held = "".join(call.held), []
                call.arguments.append(held)
                out.append(Part(held, "tool_call", call.index))
            if whole:
                self._check(call)
        return out

    def _call_for(self, delta: dict[str, Any]) -> _Call:
        """The call this delta belongs to: by the upstream's index, else by its id, else
        the call in progress. A new id on an index whose call has arguments already is a
        new call (servers that number every call 0), and so is a new name on no index."""
        index, call_id = delta.get("index"), delta.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        key: Any = index if isinstance(index, int) and not isinstance(index, bool) else None
        if key is None:
            key = ("id", call_id) if call_id is not None else None
        call = self._by_key.get(key) if key is not None else (
            self._calls[-1] if self._calls else None)
        function = delta.get("function", delta)
        named = isinstance(function, dict) and bool(function.get("name"))
        if call is not None and (call.arguments or call.held) and (
                (call_id is not None and call.id is not None and call_id != call.id)
                or (key is None and named and call.name)):
            call = None  # the same index again with another call's id; or, unnumbered,
            # a name after a call that has its name and arguments: the next call
        if call is None:
            call = _Call(len(self._calls))
            self._calls.append(call)
        if key is not None:
            self._by_key[key] = call
        if call_id is not None and call.id is None and not call.begun:
            call.id = call_id
        return call

    def _begin(self, call: _Call) -> list[Part]:
        """The call's first Part (index, id, name) with what it held of its arguments;
        earlier calls that never got arguments begin first, so indexes come in order."""
        out: list[Part] = []
        for earlier in self._calls[:call.index]:
            if not earlier.begun and earlier.name:
                out.extend(self._begin(earlier))
        call.begun = True
        call.id = call.id or new_call_id()
        held, call.held = "".join(call.held), []
        if held:
            call.arguments.append(held)
        out.append(Part(held, "tool_call", call.index, call.id, call.name))
        return out

    def _check(self, call: _Call) -> None:
        text = "".join(call.arguments)
        try:
            value = json.loads(text or "{}")
        except ValueError as exc:
            raise EngineError(f"upstream {self._upstream} sent arguments for tool call "
                              f"{call.index} ({call.name}) that are not JSON: {exc}: "
                              f"{text[:200]!r}") from None
        if not isinstance(value, dict):
            raise EngineError(f"upstream {self._upstream} sent arguments for tool call "
                              f"{call.index} ({call.name}) that are not a JSON object: "
                              f"{text[:200]!r}")
