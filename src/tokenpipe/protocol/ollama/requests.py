"""Ollama request bodies (docs/protocol.md section 4): /api/chat, /api/generate, /api/show.

- The sampling options the core honours are taken with Ollama's names (`num_predict`,
  `repeat_penalty`) and Ollama's defaults where the client leaves them out (temperature
  0.8, top_k 40, top_p 0.9); `num_predict` -1, -2 or 0 mean "no limit": the server's
  default, or what still fits.
- Options that are server settings here (`num_ctx`, `num_thread`, `num_gpu`, ...) and
  options that change nothing on their own (`mirostat_tau` without `mirostat`) are
  accepted and ignored; sampling this server does not do (`mirostat`, `typical_p`, `tfs_z`
  other than their neutral values) is refused; an option Ollama does not know is refused.
- Fields Ollama has and this server cannot honour (`images`, `suffix`, `template`,
  `context`, `think`, `tools`, `format`, `logprobs`) are refused with a sentence that says
  so; their neutral values pass. Any other field is refused as unknown.
- Numbers may come as JSON floats where Ollama takes an integer (40.0), as Go reads them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ...types import GenerationRequest, Message, SamplingParams

MAX_STOP = 16
# Ollama's defaults (api.DefaultOptions) for what a request leaves out
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.9


def _refuse(neutral: tuple[Any, ...], message: str) -> Any:
    """A validator that lets None and the neutral values through and refuses the rest."""

    def check(value: Any) -> Any:
        if value is None or any(value == n and type(value) is type(n) for n in neutral):
            return None
        raise PydanticCustomError("unsupported", message)

    return BeforeValidator(check)


def _whole(value: Any) -> Any:
    """An integral float (JSON 40.0) is the integer Ollama reads from it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _number(value: Any) -> Any:
    """An integer is a number too; a bool is not (strict mode refuses it then)."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _text(value: Any) -> Any:
    """A lone surrogate (the JSON escape "\\ud800") is not text: it cannot be tokenized."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise PydanticCustomError("invalid_text", "text with a lone UTF-16 surrogate "
                                      "(\\ud800-\\udfff) is not valid Unicode") from None
    return value


def _duration(value: Any) -> Any:
    """keep_alive: Ollama's duration ("5m") or seconds (a number, -1 forever)."""
    if value is None or (isinstance(value, str | int | float) and not isinstance(value, bool)):
        return value
    raise PydanticCustomError("duration_type", "input should be a duration (\"5m\") or a "
                              "number of seconds")


def _stop_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Refused = Any  # a field that exists only to be refused (or to pass when neutral)
Whole = Annotated[int, BeforeValidator(_whole)]
Number = Annotated[float, BeforeValidator(_number)]
Text = Annotated[str, BeforeValidator(_text)]
Stop = Annotated[list[Annotated[Text, Field(min_length=1, max_length=256)]],
                 Field(max_length=MAX_STOP), BeforeValidator(_stop_list)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Options(_Body):
    """`options`: Ollama's names, the core's ranges."""

    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Number | None = Field(default=None, ge=0.0, le=1.0)
    top_k: Whole | None = Field(default=None, ge=-1, le=2**31 - 1)
    min_p: Number | None = Field(default=None, ge=0.0, le=1.0)
    num_predict: Whole | None = Field(default=None, ge=-2)
    stop: Stop | None = None
    seed: Whole | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    repeat_penalty: Number | None = Field(default=None, gt=0.0, le=2.0)
    presence_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    # sampling this server does not do: refused unless neutral
    mirostat: Annotated[Refused, _refuse((0, 0.0), "mirostat sampling is not supported: "
                                         "use temperature, top_k, top_p or min_p")] = None
    typical_p: Annotated[Refused, _refuse((1, 1.0), "typical_p is not supported: use "
                                          "temperature, top_k, top_p or min_p")] = None
    tfs_z: Annotated[Refused, _refuse((1, 1.0), "tfs_z is not supported: use "
                                      "temperature, top_k, top_p or min_p")] = None
    # accepted and ignored: server settings here (--ctx-size, --threads, ...), or moot
    num_ctx: Whole | None = None
    num_batch: Whole | None = None
    num_gpu: Whole | None = None
    main_gpu: Whole | None = None
    num_thread: Whole | None = None
    num_keep: Whole | None = None
    repeat_last_n: Whole | None = None
    numa: bool | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    logits_all: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    embedding_only: bool | None = None
    penalize_newline: bool | None = None
    mirostat_tau: Number | None = None
    mirostat_eta: Number | None = None

    def sampling(self) -> SamplingParams:
        n = self.num_predict
        return SamplingParams(
            max_tokens=n if n is not None and n > 0 else None,
            temperature=DEFAULT_TEMPERATURE if self.temperature is None else self.temperature,
            top_p=DEFAULT_TOP_P if self.top_p is None else self.top_p,
            top_k=DEFAULT_TOP_K if self.top_k is None else max(self.top_k, 0),
            min_p=self.min_p or 0.0,
            repetition_penalty=self.repeat_penalty or 1.0,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            seed=None if self.seed is None or self.seed < 0 else self.seed,  # -1: random
            stop=tuple(self.stop or ()),
        )


_NO_IMAGES = "images are not supported: this server's models read text only"


class _Generation(_Body):
    """What /api/chat and /api/generate share."""

    model: Annotated[str, Field(min_length=1)]
    stream: bool | None = Field(default=None, description="Absent means true, as Ollama.")
    options: Options | None = None
    keep_alive: Annotated[Any, BeforeValidator(_duration)] = Field(
        default=None, description="Accepted and ignored: models stay loaded.")
    truncate: bool | None = Field(default=None, description="Accepted and ignored: nothing "
                                  "is ever truncated; a prompt that does not fit is a 400.")
    shift: bool | None = Field(default=None, description="Accepted and ignored: an answer "
                               "that reaches the context's end stops with length.")
    think: Refused = None
    # #17: format (JSON, a schema) maps to structured output here once the core has it
    format: Annotated[Refused, _refuse(("",), "format (JSON or a schema) is not supported "
                                       "yet: ask for JSON in the prompt")] = None
    logprobs: Annotated[Refused, _refuse((False,), "logprobs are not supported")] = None
    top_logprobs: Annotated[Refused, _refuse((0,), "logprobs are not supported")] = None

    @model_validator(mode="after")
    def _no_thinking(self) -> _Generation:
        if self.think is not None and self.think is not False:
            raise PydanticCustomError("unsupported", '"{model}" does not support thinking',
                                      {"model": self.model})
        return self

    @property
    def streamed(self) -> bool:
        return self.stream is not False

    def sampling(self) -> SamplingParams:
        return (self.options or Options()).sampling()


def _role(value: Any) -> Any:
    if value == "tool":
        # #17: tool results map to the core's tool messages here
        raise PydanticCustomError("unsupported", "tool messages are not supported yet")
    return value


class ChatMessage(_Body):
    role: Annotated[Literal["system", "user", "assistant"], BeforeValidator(_role)]
    content: Text | None = ""
    thinking: str | None = Field(default=None, description="Accepted and ignored: these "
                                 "models do not think.")
    images: Annotated[Refused, _refuse(([],), _NO_IMAGES)] = None
    tool_calls: Annotated[Refused, _refuse(([],), "tool calls are not supported yet")] = None
    tool_name: Annotated[Refused, _refuse(("",), "tool messages are not supported yet")] = None

    def to_message(self) -> Message:
        return Message(self.role, self.content or "")


class ChatRequest(_Generation):
    """POST /api/chat. No messages at all is Ollama's "load the model" call."""

    messages: list[ChatMessage] | None = None
    # #17: tools map to the core's tool calling here
    tools: Annotated[Refused, _refuse(([],), "tools are not supported yet")] = None

    @property
    def loads_only(self) -> bool:
        return not self.messages

    def to_request(self, model: str) -> GenerationRequest:
        messages = tuple(m.to_message() for m in self.messages or ())
        return GenerationRequest(messages=messages, params=self.sampling(), model=model)


class GenerateRequest(_Generation):
    """POST /api/generate: `prompt` through the chat template as one user turn (after
    `system`, if any), or with `raw` as it is. An empty prompt is the "load" call."""

    prompt: Text = ""
    system: Text | None = None
    raw: bool | None = None
    suffix: Annotated[Refused, _refuse(("",), "suffix (fill-in-the-middle, insert) is not "
                                       "supported")] = None
    template: Annotated[Refused, _refuse(("",), "template is not supported: the model's "
                                         "own chat template is used (send raw: true with "
                                         "a prompt you formatted yourself)")] = None
    context: Annotated[Refused, _refuse(([],), "context is not supported: send the "
                                        "conversation to /api/chat instead")] = None
    images: Annotated[Refused, _refuse(([],), _NO_IMAGES)] = None

    @model_validator(mode="after")
    def _raw_alone(self) -> GenerateRequest:
        if self.raw and self.system:  # Ollama's own refusal (template/context: above)
            raise PydanticCustomError("unsupported", "raw mode does not support template, "
                                      "system, or context")
        return self

    @property
    def loads_only(self) -> bool:
        return not self.prompt

    def to_request(self, model: str) -> GenerationRequest:
        if self.raw:
            return GenerationRequest(prompt=self.prompt, params=self.sampling(), model=model)
        turns = [Message("system", self.system)] if self.system else []
        turns.append(Message("user", self.prompt))
        return GenerationRequest(messages=tuple(turns), params=self.sampling(), model=model)


class ShowRequest(_Body):
    """POST /api/show: `model` (or Ollama's older `name`)."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = Field(default=None, description="Accepted; there is nothing "
                                 "more to show.")
    system: str | None = Field(default=None, description="Accepted and ignored.")
    options: dict[str, Any] | None = Field(default=None, description="Accepted and ignored.")

    @property
    def requested(self) -> str | None:
        return self.model or self.name or None
