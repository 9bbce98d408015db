"""Ollama's embedding routes: POST /api/embed (`input`, a text or texts -> `embeddings`) and
the older POST /api/embeddings (`prompt` -> `embedding`), as Ollama's docs/api.md defines
them. An absent or empty input embeds nothing and loads the model, as Ollama does."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ...engines.base import Embedded, EmbedInput
from .requests import _duration

MAX_INPUTS = 2048  # texts in one request, as the OpenAI door allows


class _Embedding(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: Annotated[str, Field(min_length=1)]
    keep_alive_s: Annotated[float | None, BeforeValidator(_duration)] = Field(
        default=None, alias="keep_alive", description="How long the model stays loaded "
        "after this request (\"5m\", seconds; -1: forever).")
    options: dict[str, Any] | None = Field(default=None, description="Accepted and "
                                           "ignored: sampling does not apply to embeddings.")


class EmbedRequest(_Embedding):
    """POST /api/embed."""

    input: str | Annotated[list[str], Field(max_length=MAX_INPUTS)] | None = None
    truncate: bool = Field(default=True, description="Cut an input longer than the model "
                           "embeds (true, Ollama's default); false: such an input is a 400.")
    dimensions: int | None = Field(default=None, ge=1, description="Accepted only when "
                                   "equal to the model's own length of vector.")

    def inputs(self) -> list[EmbedInput]:
        if isinstance(self.input, str):
            return [self.input] if self.input else []
        return list(self.input or [])


class LegacyEmbeddingsRequest(_Embedding):
    """POST /api/embeddings (Ollama's older route): one `prompt`, never truncated."""

    prompt: str | None = None

    def inputs(self) -> list[EmbedInput]:
        return [self.prompt] if self.prompt else []


def embed_answer(model: str, embedded: Embedded, seconds: float) -> dict[str, Any]:
    """/api/embed's body; durations in nanoseconds, as Ollama's."""
    return {"model": model, "embeddings": embedded.vectors,
            "total_duration": int(seconds * 1e9), "load_duration": 0,
            "prompt_eval_count": embedded.prompt_tokens}


def legacy_answer(embedded: Embedded) -> dict[str, Any]:
    """/api/embeddings' body: the one vector, or [] for no prompt."""
    return {"embedding": embedded.vectors[0] if embedded.vectors else []}
