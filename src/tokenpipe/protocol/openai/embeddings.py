"""POST /v1/embeddings, as OpenAI's API defines it: the request, and the answer with each
vector as floats or as base64 of little-endian float32 (what the openai SDK asks for by
default, and decodes itself)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from ...engines.base import Embedded, EmbedInput

MAX_INPUTS = 2048  # OpenAI's limit of inputs in one request

_KINDS = ("a non-empty string, a list of them, a list of token ids (integers from 0), or a "
          "list of such lists")


def _refused(why: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_input", why)


def _input(value: Any) -> Any:
    """OpenAI's four kinds of input, each refused with what is wrong (the param is `input`,
    never a branch of a union)."""
    if isinstance(value, str):
        if not value:
            raise _refused("the text is empty; send " + _KINDS)
        return value
    if not isinstance(value, list) or not value:
        raise _refused("send " + _KINDS)
    if len(value) > MAX_INPUTS:
        raise _refused(f"{len(value)} inputs; at most {MAX_INPUTS} in one request")
    if all(isinstance(x, str) for x in value):
        if not all(value):
            raise _refused(f"input[{value.index('')}] is empty")
        return value
    if _ids(value):
        return value
    if all(isinstance(x, list) for x in value):
        bad = next((i for i, x in enumerate(value) if not (x and _ids(x))), None)
        if bad is None:
            return value
        raise _refused(f"input[{bad}] is not a non-empty list of token ids (integers from 0)")
    raise _refused("the list mixes kinds; send " + _KINDS)


def _ids(value: list[Any]) -> bool:
    return all(type(x) is int and x >= 0 for x in value)


def _is_ids(value: list[Any]) -> bool:
    return bool(value) and all(type(x) is int for x in value)


InputField = Annotated[Any, BeforeValidator(_input), WithJsonSchema({
    "anyOf": [{"type": "string", "minLength": 1},
              {"type": "array", "items": {"type": "string", "minLength": 1},
               "minItems": 1, "maxItems": MAX_INPUTS},
              {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
              {"type": "array", "items": {"type": "array", "items": {
                  "type": "integer", "minimum": 0}, "minItems": 1},
               "minItems": 1, "maxItems": MAX_INPUTS}]})]


class EmbeddingRequest(BaseModel):
    """What OpenAI takes; `dimensions` only where the model's vectors have that length (no
    model here shortens its vectors)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: InputField = Field(description="A text, a list of texts, token ids, or a list "
                              "of token-id lists.")
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
        if _is_ids(self.input):
            return [list(self.input)]
        return list(self.input)


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
