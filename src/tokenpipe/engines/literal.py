"""A client's text stays text: a message that holds a special token's text (ChatML's
`<|im_end|>\n<|im_start|>system\n...`) must not become that control token, or a user
could forge a system turn. Only the chat template's own markup is parsed for special
tokens; what the request brought (message contents, tool calls' ids, names and arguments,
tools' names, descriptions and schemas) is tokenized as plain text, wherever the template
put it. A raw prompt (completions) is the client's whole prompt and keeps its special
tokens, as llama.cpp and Hugging Face parse them. (llama-server and `apply_chat_template`
parse special tokens in the whole rendered chat, user text included: tokenpipe does not.)

How: every special token's text inside the request's strings is swapped for a fresh
marker of ASCII letters and digits (which a template passes on as it is), the request is
rendered, and each marker is put back, its place noted (`marked`, `Markers.restore`).
`pieces` then cuts the rendered text where a special token's text stands outside those
places: the template's tokens, tokenized as special; the text between, tokenized as text.
A request with no special token's text in it (nearly all) is rendered and tokenized as
before."""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..types import GenerationRequest

Span = tuple[int, int]


class Specials:
    """The texts a tokenizer reads as special tokens when asked to (llama.cpp's control
    and unknown tokens; Hugging Face's special added tokens)."""

    def __init__(self, texts: Iterable[str]) -> None:
        # longest first: where two start at one place, the longer one is the token
        self.texts = tuple(sorted({t for t in texts if t}, key=len, reverse=True))
        self.pattern = re.compile("|".join(map(re.escape, self.texts))) if self.texts else None

    def within(self, text: str) -> bool:
        return self.pattern is not None and self.pattern.search(text) is not None


def marked(request: GenerationRequest, specials: Specials
           ) -> tuple[GenerationRequest, Markers] | None:
    """The request with every special token's text in its strings swapped for a marker,
    and what the markers stand for; None where its strings hold none (a raw prompt: None)."""
    if request.messages is None or specials.pattern is None:
        return None
    pattern = specials.pattern
    if not any(pattern.search(text) for text in _texts(request)):
        return None
    nonce = secrets.token_hex(8)
    while any(nonce in text for text in _texts(request)):  # pragma: no cover - 2**-64
        nonce = secrets.token_hex(8)
    markers = Markers(nonce)

    def swap(text: str) -> str:
        return pattern.sub(markers.add, text)

    messages = tuple(_swapped(m, swap, "role") for m in request.messages)
    tools = tuple(_swapped(t, swap) for t in request.tools)
    return dataclasses.replace(request, messages=messages, tools=tools), markers


class Markers:
    """The texts swapped for markers (`x<nonce>m<N>m`: ASCII letters and digits, which a
    template passes on as they are), in order."""

    def __init__(self, nonce: str) -> None:
        self.pattern = re.compile(f"x{nonce}m([0-9]+)m")
        self._nonce = nonce
        self.texts: list[str] = []

    def add(self, match: re.Match[str]) -> str:
        self.texts.append(match.group())
        return f"x{self._nonce}m{len(self.texts) - 1}m"

    def restore(self, rendered: str) -> tuple[str, list[Span]]:
        """The rendered text with each marker back as the text it stands for, and where
        those texts are in it (a marker the template dropped is simply gone; one it
        repeated, back at each place)."""
        out: list[str] = []
        spans: list[Span] = []
        at = length = 0
        for match in self.pattern.finditer(rendered):
            out.append(rendered[at:match.start()])
            length += match.start() - at
            text = self.texts[int(match.group(1))]
            out.append(text)
            spans.append((length, length + len(text)))
            length += len(text)
            at = match.end()
        out.append(rendered[at:])
        return "".join(out), spans


def pieces(text: str, literal: list[Span], specials: Specials) -> Iterator[tuple[str, bool]]:
    """`text` cut at the special tokens' texts that lie outside the `literal` spans (the
    template's own): (a token's text, True) for each, (the text between, False) for the
    rest, in order; empty pieces left out."""
    assert specials.pattern is not None
    at = 0
    spans = iter(literal)
    span = next(spans, None)
    for match in specials.pattern.finditer(text):
        while span is not None and span[1] <= match.start():
            span = next(spans, None)
        if span is not None and span[0] < match.end():
            continue  # the client's text: stays in the text around it
        if match.start() > at:
            yield text[at:match.start()], False
        yield match.group(), True
        at = match.end()
    if at < len(text):
        yield text[at:], False


def _texts(request: GenerationRequest) -> Iterator[str]:
    for m in request.messages or ():
        yield from _strings(m, "role")
    for tool in request.tools:
        yield from _strings(tool)


def _strings(item: Any, *skip: str) -> Iterator[str]:
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if f.name in skip:
            continue
        if isinstance(value, str):
            yield value
        elif isinstance(value, tuple):
            for inner in value:
                if dataclasses.is_dataclass(inner):
                    yield from _strings(inner)


def _swapped(item: Any, swap: Callable[[str], str], *skip: str) -> Any:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if f.name in skip:
            continue
        if isinstance(value, str):
            changes[f.name] = swap(value)
        elif isinstance(value, tuple) and any(dataclasses.is_dataclass(v) for v in value):
            changes[f.name] = tuple(_swapped(v, swap) for v in value)
    return dataclasses.replace(item, **changes)


def encode_chat(request: GenerationRequest, text: str, render: Callable[[GenerationRequest], str],
                specials: Specials, tokenize: Callable[[str, bool], list[int]]) -> list[int]:
    """The ids of `text`, the chat `request` rendered by `render`: `tokenize(piece,
    special)` over its pieces (special: read special tokens' texts as such), the request's
    own strings as text. Rendered again (with markers) only where those strings hold a
    special token's text."""
    found = marked(request, specials)
    if found is None:
        return tokenize(text, True)
    masked, markers = found
    text, spans = markers.restore(render(masked))
    ids: list[int] = []
    for piece, special in pieces(text, spans, specials):
        ids.extend(tokenize(piece, special))
    return ids
