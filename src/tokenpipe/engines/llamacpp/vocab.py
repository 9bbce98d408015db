"""A llama.cpp model's vocabulary: tokenizing, token pieces (cached), the chat template."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp as lc
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ...constrain.thinking import template_thinks
from ...constrain.tools import chat_messages, template_takes_tools
from ...types import GenerationRequest
from ..prefill import render_with_prefill


class Vocab:
    def __init__(self, model: Any, chat_template: str | None = None) -> None:
        """`chat_template`: a Jinja template in place of the GGUF's (--chat-template)."""
        self._model = model
        self._template = chat_template or self._meta("tokenizer.chat_template")
        self.handle = lc.llama_model_get_vocab(model)
        self.n_tokens: int = lc.llama_vocab_n_tokens(self.handle)
        self._pieces: dict[int, bytes] = {}
        self._formatter = self._chat_formatter()
        self._takes_tools = template_takes_tools(self._template)
        self.thinks = template_thinks(self._template)  # the model can think (EngineInfo)

    def render(self, request: GenerationRequest) -> str:
        """The prompt text: a raw prompt as it is, messages through the GGUF's template (a
        last assistant message is the start of the answer: engines/prefill.py)."""
        if request.prompt is not None:
            return request.prompt
        return render_with_prefill(request, self._render_chat)

    def _render_chat(self, request: GenerationRequest) -> str:
        messages, tools = chat_messages(request, self._takes_tools)
        if self._formatter is None:  # no template in the GGUF: a plain transcript
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return self._formatter(messages=messages, tools=tools).prompt  # type: ignore[arg-type]

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        data = text.encode()
        capacity = len(data) + 8
        out = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self.handle, data, len(data), out, capacity, add_special, True)
        if n < 0:
            capacity = -n
            out = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self.handle, data, len(data), out, capacity, add_special,
                                  True)
        return list(out[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token (a piece may end inside a UTF-8 character)."""
        if not special and token in self._pieces:
            return self._pieces[token]
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.handle, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.handle, token, buf, len(buf), 0, special)
        piece = buf.raw[:n]
        if not special:
            self._pieces[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.handle, token))

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def _chat_formatter(self) -> Jinja2ChatFormatter | None:
        template = self._template
        if not template:
            return None
        bos = self.piece(lc.llama_vocab_bos(self.handle), special=True).decode(errors="replace")
        eos = self.piece(lc.llama_vocab_eos(self.handle), special=True).decode(errors="replace")
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
