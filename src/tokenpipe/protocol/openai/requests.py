"""OpenAI request bodies (docs/protocol.md section 3; /v1/completions' own in completions.py):
what a request may hold, decided for a user who relies on the answer meaning what they asked.

- Every sampling parameter the core honours is accepted with OpenAI's ranges, plus vLLM's
  extras `top_k` (-1 or 0: off), `min_p` and `repetition_penalty`.
- `response_format` (json_object, json_schema) and `tools` are generated under a grammar
  (constrain/).
- `logprobs` (chat: `logprobs` + `top_logprobs` 0-20; completions: `logprobs` 0-20,
  OpenAI allows 5) are the engine's own (protocol.md section 3).
- `n` choices up to the server's `--max-n` (the door checks it: server/openai/choices.py).
- OpenAI features this server cannot honour (`functions`, `audio`, ...) are refused with
  400 naming the parameter (code `unsupported_parameter` / `unsupported_value`), never
  silently ignored; their neutral values (`functions: []`, ...) pass.
- Fields the official SDKs send that do not change the answer (`user`, `metadata`, `store`,
  `service_tier`, `parallel_tool_calls`, `prompt_cache_key`, `safety_identifier`) are
  accepted and ignored.
- Anything else is refused like OpenAI does: "Unrecognized request argument supplied".
- Defaults are OpenAI's: `temperature` 1, and for /v1/completions `max_tokens` 16.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ...sampling_defaults import FIELDS, given
from ...types import GenerationRequest, Message, OutputFormat, SamplingParams, ToolCall
from ..common import check_text as _text
from ..common import neutral_only as _refuse
from ..formats import (
    MessageToolCall,
    NamedToolChoice,
    ResponseFormat,
    ToolSpec,
    check_tools,
    tool_choice_of,
)

MAX_STOP = 16  # OpenAI allows 4; the core's matcher takes more, as vLLM does

def _unsupported(value: Any, message: str) -> Any:
    raise PydanticCustomError("unsupported_value", message)


# Hidden from the schema: they exist only to be refused (or to pass when neutral).
Refused = SkipJsonSchema[Any]


def _stop_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


StopField = Annotated[
    # the length bound sits on the list itself: on the union it crashed on an explicit null
    Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]],
              Field(max_length=MAX_STOP)] | None,
    BeforeValidator(_stop_list),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                              {"type": "array", "items": {"type": "string", "minLength": 1},
                               "maxItems": MAX_STOP},
                              {"type": "null"}],
                    "description": "Up to 16 strings; the first one generated ends the "
                                   "answer and is never part of it."}),
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Body):
    include_usage: bool | None = Field(
        default=None, description="Send one more chunk, with `usage` and empty `choices`.")
    include_obfuscation: bool | None = Field(
        default=None, description="Accepted and ignored (no obfuscation is added).")


class _Sampling(_Body):
    """What /v1/chat/completions and /v1/completions share."""

    model: str | None = Field(default=None, description="A model id from /v1/models; "
                              "absent means the server's model.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    resumable: bool | None = Field(
        default=None, description="tokenpipe's extra, with stream: the response header "
        "X-Stream-Token names the stream and each event has an SSE id; after a drop, GET "
        "/v1/streams/{token} with Last-Event-ID continues it (docs/protocol.md).")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0,
                                      description="Absent means 1, as OpenAI; 0 is greedy.")
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, description="vLLM extra; -1 or 0: off.")
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, description="vLLM extra.")
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0,
                                             description="vLLM extra; 1 is off.")
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: StopField = None
    return_token_ids: bool | None = Field(
        default=None, description="vLLM's extra: the answer's token ids go with its text "
        "(each chunk's or choice's token_ids) and the prompt's (prompt_token_ids: the "
        "first chunk that has them; chat: the object's, completions: the choice's).")
    n: int | None = Field(default=None, ge=1, description="Choices, up to the server's "
                          "--max-n (8): one prompt decoded once; with a seed, choice i "
                          "uses seed + i.")
    response_format: ResponseFormat | None = Field(
        default=None, description="text, json_object or json_schema: the answer is "
        "generated under the schema's grammar, so it parses and validates (unless "
        "max_tokens cuts it: finish_reason length).")
    logit_bias: Annotated[Refused, _refuse(({},), "logit_bias is not supported")] = None
    # accepted and ignored: they do not change the answer
    user: str | None = Field(default=None, description="Accepted and ignored.")
    metadata: dict[str, str] | None = Field(default=None, description="Accepted and ignored.")
    store: bool | None = Field(default=None, description="Accepted and ignored (nothing is "
                               "stored).")
    service_tier: str | None = Field(default=None, description="Accepted and ignored.")
    prompt_cache_key: str | None = Field(default=None, description="Accepted and ignored.")
    safety_identifier: str | None = Field(default=None, description="Accepted and ignored.")

    @model_validator(mode="after")
    def _options_need_stream(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError(
                "invalid_value", "The 'stream_options' parameter is only allowed when "
                "'stream' is enabled.", {"param": "stream_options"})
        if self.resumable and not self.stream:
            raise PydanticCustomError(
                "invalid_value", "The 'resumable' parameter is only allowed when 'stream' "
                "is enabled.", {"param": "resumable"})
        return self

    @property
    def format(self) -> OutputFormat | None:
        return None if self.response_format is None else self.response_format.to_format()

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs_top is not None

    @property
    def logprobs_top(self) -> int | None:
        """How many alternatives per token the answer lists; None: no logprobs."""
        return None

    def sampling(self, max_tokens: int | None) -> SamplingParams:
        top_k = self.top_k or 0
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=max(top_k, 0),
            min_p=self.min_p or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None
            else self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            seed=None if self.seed is None else self.seed % 2**63,
            stop=tuple(self.stop or ()),
            logprobs=self.logprobs_top,
            given=given(self, FIELDS),
        )


def _flatten_content(value: Any) -> Any:
    """A list of content parts becomes its text; any part other than text is refused."""
    if not isinstance(value, list):
        return _text(value)
    texts = []
    for part in value:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise PydanticCustomError("invalid_type", "content parts are objects with a type")
        if part["type"] != "text":
            raise PydanticCustomError(
                "unsupported_value", "content parts of type '{kind}' are not supported: "
                "this model reads text only", {"kind": part["type"]})
        if set(part) != {"type", "text"} or not isinstance(part["text"], str):
            raise PydanticCustomError("invalid_value",
                                      "a text part is {\"type\": \"text\", \"text\": string}")
        texts.append(part["text"])
    return _text("\n".join(texts))


_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
Content = Annotated[
    str,
    BeforeValidator(_flatten_content),
    WithJsonSchema({"anyOf": [{"type": "string"},
                              {"type": "array", "items": _TEXT_PART}],
                    "description": "Text, or a list of text parts (joined with newlines)."}),
]


_NULL_OR_EMPTY: JsonDict = {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}
# What _turn_shape checks, for /docs and the schema-driven tests: a tool turn (and only a
# tool turn) has tool_call_id; only an assistant turn has tool calls, and only it may have
# null content when it has calls.
_TURN_RULES: JsonDict = {"allOf": [
    {"if": {"properties": {"role": {"const": "tool"}}, "required": ["role"]},
     "then": {"required": ["tool_call_id"],
              "properties": {"tool_call_id": {"type": "string"}}},
     "else": {"properties": {"tool_call_id": {"type": "null"}}}},
    {"if": {"properties": {"role": {"const": "assistant"}}, "required": ["role"]},
     "then": {"anyOf": [
         {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
         {"required": ["tool_calls"], "properties": {"tool_calls": {"minItems": 1}}}]},
     "else": {"required": ["content"], "properties": {
         "content": {"not": {"type": "null"}}, "tool_calls": _NULL_OR_EMPTY}}},
]}


class ChatMessage(_Body):
    model_config = ConfigDict(json_schema_extra=_TURN_RULES)

    role: Literal["system", "developer", "user", "assistant", "tool"] = Field(
        description="`developer` is read as `system`; `tool` carries a call's result.")
    content: Content | None = None
    name: str | None = Field(default=None, description="Accepted and ignored.")
    tool_calls: list[MessageToolCall] | None = Field(
        default=None, description="An assistant turn's calls (the history of a tool loop).")
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=256,
                                     description="A tool turn: the call it answers.")
    function_call: Annotated[Refused, _refuse((), "function calls are not supported")] = None
    refusal: Annotated[Refused, _refuse(("",), "refusal is not supported")] = None

    @model_validator(mode="after")
    def _turn_shape(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise PydanticCustomError("invalid_value", "only assistant messages have "
                                      "tool_calls", {"field": "tool_calls"})
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise PydanticCustomError(
                "invalid_value", "a tool message needs tool_call_id, and only a tool "
                "message has one", {"field": "tool_call_id"})
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise PydanticCustomError("missing", "Field required", {"field": "content"})
        return self

    def to_message(self) -> Message:
        role = "system" if self.role == "developer" else self.role
        calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments)
                      for c in self.tool_calls or ())
        return Message(role, self.content or "", calls, self.tool_call_id)


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions. Parameters OpenAI defines and tokenpipe cannot honour
    (functions, logprobs, audio, prediction, ...) answer 400."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, description="Absent means the "
                                   "server's default, or what still fits the context.")
    max_completion_tokens: int | None = Field(default=None, ge=1,
                                              description="The same as max_tokens.")
    modalities: list[str] | None = Field(default=None, description='Only ["text"].')
    tools: list[ToolSpec] | None = Field(
        default=None, max_length=128, description="Functions the model may call: each call "
        "is generated under a grammar of the offered functions' schemas.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        default=None, description="auto (default with tools): text or calls; none; "
        "required: at least one call; a named function: a call of it.")
    parallel_tool_calls: bool | None = Field(default=None, description="true: more than one "
                                             "call per answer with tool_choice auto or required "
                                             "(absent: the server's default, false).")
    reasoning_format: Literal["auto", "deepseek", "none"] | None = Field(
        default=None, description="llama.cpp's extra: auto (default) and deepseek put a "
        "thinking section in reasoning_content (and reasoning); none keeps it in content.")
    continue_final_message: bool | None = Field(
        default=None, description="vLLM's extra: true when the last message is an assistant "
        "turn to continue (tokenpipe continues one whether or not this says so; a value "
        "that says otherwise answers 400).")
    add_generation_prompt: bool | None = Field(
        default=None, description="vLLM's extra: false when the last message is an "
        "assistant turn to continue, true otherwise (a value that says otherwise answers "
        "400).")
    logprobs: bool | None = Field(default=None, description="Each answer token's "
                                  "log-probability in choices[].logprobs.content.")
    top_logprobs: int | None = Field(default=None, ge=0, le=20, description="With logprobs: "
                                     "this many likeliest tokens at each step.")
    functions: Annotated[Refused, _refuse(([],), "functions are not supported")] = None
    function_call: Annotated[Refused, _refuse(("none",), "functions are not supported")] = None
    audio: Annotated[Refused, _refuse((), "audio output is not supported")] = None
    prediction: Annotated[Refused, _refuse((), "predicted outputs are not supported")] = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh",
                              "max"] | None = Field(
        default=None, description="Any level but none asks the model to think (the level is "
        "not applied); a model whose chat template has no thinking section answers 400 "
        "naming reasoning_effort. none: a section it writes is split off as usual.")
    verbosity: Annotated[Refused, _refuse((), "verbosity is not supported")] = None
    web_search_options: Annotated[Refused, _refuse((), "web search is not supported")] = None

    @field_validator("modalities")
    @classmethod
    def _text_modality(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and value != ["text"]:
            _unsupported(value, "only the text modality is supported")
        return value

    @model_validator(mode="after")
    def _one_max(self) -> ChatCompletionRequest:
        a, b = self.max_tokens, self.max_completion_tokens
        if a is not None and b is not None and a != b:
            raise PydanticCustomError(
                "invalid_value", "max_tokens and max_completion_tokens disagree; send one",
                {"param": "max_completion_tokens"})
        return self

    @model_validator(mode="after")
    def _tools_named_once(self) -> ChatCompletionRequest:
        check_tools(self.tools, self.tool_choice)
        return self

    @model_validator(mode="after")
    def _continues_as_said(self) -> ChatCompletionRequest:
        """vLLM's two flags, where they agree with what tokenpipe does: continue a last
        assistant turn (a prefill, docs/protocol.md), begin a new answer after any other."""
        last = self.messages[-1]
        prefill = last.role == "assistant" and not last.tool_calls
        for name, value, means in (("continue_final_message", self.continue_final_message,
                                    prefill),
                                   ("add_generation_prompt", self.add_generation_prompt,
                                    not prefill)):
            if value is not None and value != means:
                raise PydanticCustomError(
                    "unsupported_value", "tokenpipe continues a last assistant message and "
                    "begins a new answer after any other: {name} {value} says otherwise",
                    {"param": name, "name": name, "value": str(value).lower()})
        return self

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise PydanticCustomError(
                "invalid_value", "top_logprobs needs logprobs set to true",
                {"param": "top_logprobs"})
        return self

    @property
    def logprobs_top(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def max_tokens_param(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens else "max_tokens"

    def to_request(self) -> GenerationRequest:
        messages = tuple(m.to_message() for m in self.messages)
        params = self.sampling(self.max_completion_tokens or self.max_tokens)
        tools = tuple(t.to_tool() for t in self.tools or ())
        return GenerationRequest(messages=messages, params=params, model=self.model,
                                 format=self.format, tools=tools,
                                 tool_choice=tool_choice_of(self.tool_choice,
                                                            self.parallel_tool_calls),
                                 split_reasoning=self.reasoning_format != "none",
                                 think=self.reasoning_effort not in (None, "none"),
                                 token_ids=bool(self.return_token_ids))
