"""POST /v1/embeddings, as OpenAI's API defines it: the request, and the answer with each
vector as floats or as base64 of little-endian float32 (what the openai SDK asks for by
default, and decodes itself)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...engines.base import Embedded, EmbedInput

MAX_INPUTS = 2048  # OpenAI's limit of inputs in one request

Ids = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class EmbeddingRequest(BaseModel):
    """What OpenAI takes; `dimensions` only where the model's vectors have that length (no
    model here shortens its vectors)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: (Annotated[str, Field(min_length=1)]
            | Annotated[list[Annotated[str, Field(min_length=1)]],
                        Field(min_length=1, max_length=MAX_INPUTS)]
            | Ids
            | Annotated[list[Ids], Field(min_length=1, max_length=MAX_INPUTS)]) = Field(
        description="A text, a list of texts, token ids, or a list of token-id lists.")
    model: str | None = Field(default=None, description="The served model (default: the "
                              "first); it must be one that embeds (/v1/models says which).")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1, description="Accepted only when "
                                   "equal to the model's own length of vector.")
    user: str | None = None

    def inputs(self) -> list[EmbedInput]:
        """The inputs as the engine takes them: texts, or token-id lists."""
        if isinstance(self.input, str):
            return [self.input]
        if self.input and isinstance(self.input[0], int):
            return [list(self.input)]
        return list(self.input)  # type: ignore[arg-type]


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingUsage


def as_base64(vector: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def embedding_list(model: str, embedded: Embedded, encoding: str) -> EmbeddingList:
    data = [EmbeddingItem(index=i, embedding=as_base64(v) if encoding == "base64" else v)
            for i, v in enumerate(embedded.vectors)]
    tokens = embedded.prompt_tokens
    return EmbeddingList(data=data, model=model,
                         usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens))
