"""A llama.cpp model's vocabulary: tokenizing, token pieces (cached), the chat template."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp as lc
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ...constrain.thinking import template_thinks
from ...constrain.tools import chat_messages, template_takes_tools
from ...types import GenerationRequest
from ..literal import Specials, encode_chat
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
        self.specials = Specials(self._special_texts())
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

    def encode_chat(self, request: GenerationRequest, text: str) -> list[int]:
        """The ids of `text`, `request` rendered: the template's special tokens parsed, the
        request's own text as text (engines/literal.py)."""
        return encode_chat(request, text, self.render, self.specials,
                           lambda piece, special: self.tokenize(piece, special=special))

    def tokenize(self, text: str, *, add_special: bool = False, special: bool = True
                 ) -> list[int]:
        """`special`: special tokens' texts become those tokens (llama.cpp's parse_special)."""
        data = text.encode()
        capacity = len(data) + 8
        out = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self.handle, data, len(data), out, capacity, add_special,
                              special)
        if n < 0:
            capacity = -n
            out = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self.handle, data, len(data), out, capacity, add_special,
                                  special)
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

    def _special_texts(self) -> list[str]:
        """The texts llama.cpp reads as tokens only with parse_special: its control and
        unknown tokens' (user-defined ones it splits out either way)."""
        hidden = lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN
        return [lc.llama_vocab_get_text(self.handle, i).decode(errors="replace")
                for i in range(self.n_tokens) if lc.llama_vocab_get_attr(self.handle, i) & hidden]

    def _chat_formatter(self) -> Jinja2ChatFormatter | None:
        template = self._template
        if not template:
            return None
        bos = self.piece(lc.llama_vocab_bos(self.handle), special=True).decode(errors="replace")
        eos = self.piece(lc.llama_vocab_eos(self.handle), special=True).decode(errors="replace")
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
