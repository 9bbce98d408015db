"""Hugging Face transformers (PyTorch), the original article's stack, with its flaws fixed.

This module is the engine's face: loading, the prompt's text and tokens, the event-loop
side of a stream. One decode thread owns the model (decode_thread.py); the event loop never
runs a forward pass. The thread
keeps up to `parallel` sequences in one batch (batch.KVBatch) and runs one forward per
step with one token per sequence. Requests waiting to join are prefilled together in one
forward (left-padded, like the batch), a group of similar lengths bounded by prefill_tokens
padded tokens (a lone request, or one longer than the budget, goes alone), and then join;
between two prefill groups the running sequences take a step. Closing a stream marks its
sequence cancelled, and the thread drops it before the next step (a request cancelled
during its prefill does not join), so the compute stops within a token. Sampling is our
own (sampling.py), which gives each request its own seeded generator and its own
settings inside one batch.
Tokens reach asyncio through one call_soon_threadsafe per event loop per step.

Why not transformers' own continuous batching (ContinuousBatchingManager, generate_batch):
docs/transformers-engine.md has the figures (transformers 5.24, the 2-core CPU, the bundled
model). This loop was 1.11x faster at 1 stream and 1.18x at 8 (A B A B on one model object),
and the manager has no per-request seed, one do_sample flag for the whole batch, no min_p or
penalties per request, no final event for a cancelled request, and a bad value in one
request (temperature 0 when sampling) stops its loop for all of them. Its one edge, a
lower TTFT p99 at 8 simultaneous streams from prefilling them in one forward, this loop now
has too (the figures are in the same page).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import queue
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ...constrain import Guides, OnFirstUse, check_request, hf_view
from ...constrain.thinking import template_thinks
from ...constrain.tools import chat_messages, template_takes_tools
from ...errors import EngineUnavailable, MissingDependency
from ...text import IdDetokenizer
from ...types import EngineEvent, EngineFinish, EngineStart, GenerationRequest
from ..base import Engine, EngineInfo, EngineOptions, PreparedRequest
from ..literal import Specials, encode_chat
from ..prefill import prefill_of, render_with_prefill

try:
    from transformers import DynamicCache

    from .batch import mergeable
    from .decode_thread import DecodeThread, StepHook, log
    from .kind import KIND
    from .loading import end_tokens, load, model_name
    from .next_token import Seq
    from .sentence import SentenceEngine, is_sentence_folder
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependency(
        f"the transformers engine needs {exc.name or 'torch and transformers'}: "
        "pip install 'tokenpipe[transformers]' (CPU torch: pip install torch==2.13.0)"
    ) from None

# Padded tokens (rows x longest prompt) one prefill forward may take: about 1 s on the
# 2-core CPU with the bundled model, the longest a burst of arrivals stalls running streams.
PREFILL_TOKENS = 512


class TransformersEngine(DecodeThread, Engine):
    kind = KIND
    def __init__(self, options: EngineOptions, *, step_hook: StepHook | None = None,
                 prefill_tokens: int = PREFILL_TOKENS) -> None:
        """step_hook (tests only) runs in the decode thread before each forward pass with
        the sequences it is about to advance; an exception it raises is a model fault.
        prefill_tokens bounds a prefill group (see _run)."""
        self.options = options
        self.parallel = max(1, options.parallel)
        self.prefill_tokens = prefill_tokens
        self.info = EngineInfo("transformers", options.model_id or model_name(options.model),
                               options.total_context, self.parallel)
        self._step_hook = step_hook
        self._inbox: queue.SimpleQueue[Seq] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self._model: Any = None
        self._tok: Any = None
        self._pieces: dict[int, bytes] = {}  # token id -> its text as UTF-8 (logprobs)

    logprobs = True  # the log-softmax of the row each token is sampled from

    @classmethod
    def from_options(cls, options: EngineOptions) -> Engine:
        """This engine, or for a sentence-transformers folder the one that embeds it."""
        if is_sentence_folder(options.model):
            return SentenceEngine.from_options(options)
        return cls(options)

    # ---- loading ------------------------------------------------------------------------
    async def load(self) -> None:
        await asyncio.to_thread(self._load)
        self._thread = threading.Thread(target=self._run, name="transformers-decode",
                                        daemon=True)
        self._thread.start()

    def _load(self) -> None:
        source, self._tok, self._model, device, dtype = load(self.options)
        if self.options.chat_template is not None:  # --chat-template: in place of the model's
            self._tok.chat_template = self.options.chat_template
        self._device = device
        self._specials = Specials(t.content for t in self._tok.added_tokens_decoder.values()
                                  if t.special)
        config = self._model.config.get_text_config(decoder=True)
        native = getattr(config, "max_position_embeddings", None) or self.options.total_context
        self._eog = end_tokens(self._model, self._tok)
        # transformers 5.x renamed forward's past_key_values to cache (the old name warns).
        params = inspect.signature(self._model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._batchable = mergeable(DynamicCache(config=self._model.config))
        tok, n_logits = self._tok, int(self._model.get_output_embeddings().weight.shape[0])
        # the grammar library's view of the vocabulary: built by the first request with an
        # output format, once per model (constrain/vocabularies.py)
        key = (str(source), len(tok), n_logits)
        self._guides = OnFirstUse(lambda: Guides.of(hf_view(key, tok), n_logits))
        max_batch = self.parallel if self._batchable else 1
        self.info = EngineInfo("transformers", self.info.model_id,
                               min(int(native), self.options.total_context), max_batch,
                               thinks=template_thinks(getattr(self._tok, "chat_template",
                                                              None)))
        log.info("loaded %s on %s (%s): context %d, batch %d", source, device, dtype,
                 self.info.context_tokens, max_batch)

    def check_output(self, request: GenerationRequest) -> Mapping[str, Any]:
        return check_request(self._guides.result, request, prefill_of(request) or "")

    # ---- text ---------------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        if request.prompt is not None:
            return request.prompt
        # a last assistant message is the start of the answer (engines/prefill.py)
        return render_with_prefill(request, self._render_chat)

    def _render_chat(self, request: GenerationRequest) -> str:
        template = getattr(self._tok, "chat_template", None)
        messages, tools = chat_messages(request, template_takes_tools(template))
        if not template:  # a plain transcript, as llamacpp
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        text: str = self._tok.apply_chat_template(messages, tools=tools,
                                                  add_generation_prompt=True, tokenize=False)
        return text

    def tokenize(self, text: str, *, add_special: bool = False, special: bool = True
                 ) -> list[int]:
        """`special`: special tokens written in the text are parsed as such (else they are
        text: the tokenizer's split_special_tokens); the tokenizer's own BOS/EOS are added
        only with add_special (raw completions)."""
        ids: list[int] = self._tok(text, add_special_tokens=add_special,
                                   split_special_tokens=not special)["input_ids"]
        return ids

    def encode(self, request: GenerationRequest, text: str) -> list[int]:
        # A raw completion gets the tokenizer's own BOS where it adds one (the chat template
        # writes its own); a chat's own text stays text (engines/literal.py).
        if request.prompt is not None:
            return self.tokenize(text, add_special=True)
        return encode_chat(request, text, self.render, self._specials,
                           lambda piece, special: self.tokenize(piece, special=special))

    def _detokenizer(self, prompt_ids: Sequence[int]) -> IdDetokenizer:
        tok = self._tok
        return IdDetokenizer(lambda ids: tok.decode(ids, skip_special_tokens=True), prompt_ids)

    # ---- streaming (event loop side) ----------------------------------------------------
    def healthy(self) -> bool:
        return self._failure is None and self._thread is not None and self._thread.is_alive()

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        if not self.healthy():
            raise EngineUnavailable(self._failure or "the transformers engine is not running")
        items: asyncio.Queue[EngineEvent | BaseException] = asyncio.Queue()
        seq = Seq(prepared, items.put_nowait, asyncio.get_running_loop())
        self._inbox.put(seq)
        self._wake.set()
        try:
            yield EngineStart(prepared.prompt_tokens)
            while True:
                item = await items.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, EngineFinish):
                    return
        finally:  # closed, cancelled or done: the decode thread drops it before its next step
            seq.cancelled = True
            self._wake.set()

    async def aclose(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
        self._model = None
        gc.collect()

    def _piece(self, token: int) -> bytes:
        """A token's text as UTF-8 (a token that ends inside a character decodes to U+FFFD
        here: the HF tokenizer gives no bytes of its own)."""
        data = self._pieces.get(token)
        if data is None:
            data = self._pieces[token] = self._tok.decode([token]).encode()
        return data
