"""OpenAI response objects: what /docs documents and what the answers are encoded from
(with model_dump_json; the per-token chunk is templated once, render.py)."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(default=0, description="Prompt tokens whose KV cache was "
                               "reused (an earlier turn, a shared prefix), not decoded again")
    audio_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0
    audio_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class UsageInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = Field(
        default_factory=CompletionTokensDetails)


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="The arguments as JSON text: valid for the "
                           "function's schema (they are generated under it).")


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut] | None = None
    reasoning_content: str | None = Field(default=None, description="The thinking section "
                                          "(as DeepSeek and llama.cpp name it).")
    reasoning: str | None = Field(default=None, description="The same text, under the name "
                                  "vLLM and OpenRouter use.")

    @model_serializer(mode="wrap")
    def _only_what_it_has(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("tool_calls", "reasoning_content", "reasoning"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


FinishReasonName = Literal["stop", "length", "tool_calls", "cancelled"]


class _WithIds(BaseModel):
    """vLLM's `token_ids` / `prompt_token_ids` (`return_token_ids`), out of the object
    when not asked for (None)."""

    @model_serializer(mode="wrap")
    def _ids_when_asked(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("token_ids", "prompt_token_ids"):
            if key in data and data[key] is None:
                del data[key]
        return data


class TopLogprob(BaseModel):
    token: str
    logprob: float = Field(description="Log-softmax of the model's logits at this step, "
                           "after the output format's mask, before penalties and "
                           "temperature.")
    bytes: list[int] | None = Field(description="The token's UTF-8 bytes (a token may hold "
                                    "part of a character).")


class TokenLogprobOut(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(description="The `top_logprobs` likeliest "
                                           "tokens at this step, best first.")


class ChoiceLogprobs(BaseModel):
    """Chat: one entry per answer token whose text the choice (or the chunk) carries."""

    content: list[TokenLogprobOut] | None
    refusal: None = None


class CompletionLogprobs(BaseModel):
    """/v1/completions: per answer token, its text, log-probability, the `logprobs`
    likeliest tokens, and where its text starts in the answer (characters)."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class ChatChoice(_WithIds):
    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonName
    token_ids: list[int] | None = None


class ChatCompletion(_WithIds):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    system_fingerprint: None = None
    prompt_token_ids: list[int] | None = None


class FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str = ""


class ToolCallDelta(BaseModel):
    """A call's first delta has `index`, `id`, `type` and `function.name`; the next ones
    `index` and a fragment of `function.arguments`."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        out = {k: v for k, v in data.items() if v is not None}
        out["function"] = {k: v for k, v in data["function"].items() if v is not None}
        return out


class ChunkDelta(BaseModel):
    """Only what changed, as OpenAI sends it: `{"role": "assistant", "content": ""}` first,
    then `{"content": "..."}` or `{"tool_calls": [...]}`, and `{}` in the chunk with the
    finish_reason."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None}


class ChunkChoice(_WithIds):
    index: int = 0
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonName | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(_WithIds):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageInfo | None = None
    system_fingerprint: None = None
    prompt_token_ids: list[int] | None = None


class TextChoice(_WithIds):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReasonName | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class Completion(BaseModel):
    """A /v1/completions answer; streamed, each chunk has this shape with a piece of text
    (`finish_reason` null until the last), and `usage` only in the include_usage chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[TextChoice]
    usage: UsageInfo | None = None
    system_fingerprint: None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tokenpipe"
    max_model_len: int | None = None  # as vLLM: the tokens one request may use in all
    # tokenpipe's: available, loading, loaded or failed (models load on demand)
    state: str | None = None
    # tokenpipe's: what the model serves, "completion", "thinking" (its chat template has a
    # thinking section) and (where it embeds) "embedding"
    capabilities: list[str] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def now() -> int:
    return int(time.time())

