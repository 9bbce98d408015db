"""A sentence-transformers folder (modules.json beside a transformers encoder) on the
transformers engine: it embeds and generates nothing.

The pipeline is the folder's own, computed as sentence-transformers computes it: the
tokenizer cut at `max_seq_length` (sentence_bert_config.json), the encoder's last hidden
state, the pooling of 1_Pooling/config.json (mean over the attention mask, cls, or max),
then L2 normalization (the engine contract's; a folder with a Normalize module asks for
it too). Computed on a worker thread, one request at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ...errors import BadRequest, ContextOverflow, EngineError
from ...types import EngineEvent, GenerationRequest
from ..base import Embedded, EmbedInput, Engine, EngineInfo, EngineOptions, PreparedRequest
from .loading import model_name

BATCH = 32  # inputs one forward pass holds


def is_sentence_folder(model: str | None) -> bool:
    return model is not None and (Path(model) / "modules.json").is_file()


class SentenceEngine(Engine):
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.folder = Path(options.model or "")
        self.info = EngineInfo("transformers", options.model_id or model_name(options.model),
                               _max_tokens(self.folder), 1, embeds=True, generates=False)
        self._model: Any = None
        self._tok: Any = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "transformers-embed")

    @classmethod
    def from_options(cls, options: EngineOptions) -> SentenceEngine:
        return cls(options)

    async def load(self) -> None:
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        try:
            self._tok = AutoTokenizer.from_pretrained(str(self.folder))
            self._model = AutoModel.from_pretrained(str(self.folder)).eval()
        except Exception as exc:
            raise EngineError(f"transformers could not load {self.folder}: "
                              f"{type(exc).__name__}: {exc}") from exc
        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        pooling = json.loads((self.folder / "1_Pooling" / "config.json").read_text())
        self._pooling = ("cls" if pooling.get("pooling_mode_cls_token") else
                         "max" if pooling.get("pooling_mode_max_tokens") else "mean")
        self._size = int(pooling.get("word_embedding_dimension")
                         or self._model.config.hidden_size)

    @property
    def embedding_size(self) -> int | None:
        return None if self._model is None else self._size

    async def embed(self, inputs: Sequence[EmbedInput], *, truncate: bool = False,
                    ) -> Embedded:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._embed, list(inputs), truncate)

    def _embed(self, inputs: list[EmbedInput], truncate: bool) -> Embedded:
        window, n_vocab = self.info.context_tokens, len(self._tok)
        rows: list[list[int]] = []
        for i, x in enumerate(inputs):
            ids = self._tok(x)["input_ids"] if isinstance(x, str) else list(x)
            if not x or not ids:
                raise BadRequest(f"input[{i}] is empty: send some text", param="input")
            if any(not 0 <= t < n_vocab for t in ids):
                raise BadRequest(f"input[{i}] has a token id outside this model's vocabulary "
                                 f"of {n_vocab}", param="input")
            if len(ids) > window:
                if not truncate:
                    raise ContextOverflow(f"input[{i}] has {len(ids)} tokens; this model "
                                          f"embeds at most {window}: shorten it (or ask to "
                                          "truncate)", param="input")
                ids = ids[:window - 1] + ids[-1:]  # its closing [SEP] kept, as the tokenizer
            rows.append(ids)
        vectors: list[list[float]] = []
        for start in range(0, len(rows), BATCH):
            vectors.extend(self._forward(rows[start:start + BATCH]))
        return Embedded(vectors, sum(len(r) for r in rows))

    @torch.inference_mode()
    def _forward(self, rows: list[list[int]]) -> list[list[float]]:
        padded = self._tok.pad({"input_ids": rows}, return_tensors="pt")
        mask = padded["attention_mask"]
        hidden = self._model(**padded).last_hidden_state
        if self._pooling == "cls":
            pooled = hidden[:, 0]
        elif self._pooling == "max":
            pooled = hidden.masked_fill(mask.unsqueeze(-1) == 0, -1e9).max(dim=1).values
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        result: list[list[float]] = torch.nn.functional.normalize(pooled, dim=-1).tolist()
        return result

    # ---- generation: none --------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        raise BadRequest(f"the model {self.info.model_id!r} only makes embeddings (a "
                         "sentence-transformers folder): it cannot generate text",
                         param="model")

    def tokenize(self, text: str) -> Sequence[int]:
        return list(self._tok(text)["input_ids"])

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        raise BadRequest(f"the model {self.info.model_id!r} cannot generate text",
                         param="model")
        yield  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        await asyncio.to_thread(self._pool.shutdown, True, cancel_futures=True)
        self._model = None


def _max_tokens(folder: Path) -> int:
    """sentence_bert_config.json's max_seq_length (sentence-transformers cuts there)."""
    try:
        return int(json.loads((folder / "sentence_bert_config.json").read_text())
                   ["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 512
