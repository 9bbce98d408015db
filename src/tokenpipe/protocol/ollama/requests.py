"""Ollama request bodies (docs/protocol.md section 4): /api/chat, /api/generate, /api/show.

- The sampling options the core honours are taken with Ollama's names (`num_predict`,
  `repeat_penalty`) and Ollama's defaults where the client leaves them out (temperature
  0.8, top_k 40, top_p 0.9); `num_predict` -1, -2 or 0 mean "no limit": the server's
  default, or what still fits.
- Options that are server settings here (`num_ctx`, `num_thread`, `num_gpu`, ...) and
  options that change nothing on their own (`mirostat_tau` without `mirostat`) are
  accepted and ignored; sampling this server does not do (`mirostat`, `typical_p`, `tfs_z`
  other than their neutral values) is refused; an option Ollama does not know is refused.
- `format` ("json", or a JSON Schema object) and chat `tools` are generated under a
  grammar; `think` (true, or a level) asks the model to think (a model whose chat template
  has no thinking section refuses it, as Ollama does) and splits the section off into
  `thinking`;
  assistant `tool_calls` and `tool` messages in the history map to the core's calls and
  results (Ollama's calls have no id: ids are made up from their place, and each tool
  message answers the previous assistant turn's calls in order, by `tool_name` when given).
- Fields Ollama has and this server cannot honour (`images`, `suffix`, `template`,
  `context`, `logprobs`) are refused with a sentence that says so; their neutral values
  pass. Any other field is refused as unknown.
- Numbers may come as JSON floats where Ollama takes an integer (40.0), as Go reads them.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ...config_file import parse_duration
from ...constrain.grammars import schema_text
from ...sampling_defaults import given
from ...types import GenerationRequest, Message, OutputFormat, SamplingParams, ToolCall
from ..common import check_text, neutral_only
from ..formats import ToolName, ToolSpec

_refuse = functools.partial(neutral_only, kind="unsupported")

MAX_STOP = 16
# Ollama's defaults (api.DefaultOptions) for what a request leaves out
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.9


def _whole(value: Any) -> Any:
    """An integral float (JSON 40.0) is the integer Ollama reads from it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _number(value: Any) -> Any:
    """An integer is a number too; a bool is not (strict mode refuses it then)."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _duration(value: Any) -> Any:
    """keep_alive: Ollama's duration ("5m") or seconds (a number, -1 forever)."""
    if value is None:
        return value
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return parse_duration(value)
    raise PydanticCustomError("duration_type", "input should be a duration (\"5m\") or a "
                              "number of seconds")


def _stop_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _format(value: Any) -> Any:
    """`format`: "json", a JSON Schema object, or nothing ("" or null)."""
    if value is None or value == "":
        return None
    if value == "json":
        return OutputFormat("json_object")
    if isinstance(value, dict):
        return OutputFormat("json_schema", schema_text(value))
    raise PydanticCustomError("unsupported", 'format must be "json" or a JSON Schema '
                              "object")


def _think(value: Any) -> Any:
    if value is None or isinstance(value, bool) or value in ("high", "medium", "low"):
        return value
    raise PydanticCustomError("unsupported", 'think must be true, false, "high", "medium" '
                              'or "low"')


Refused = Any  # a field that exists only to be refused (or to pass when neutral)
Whole = Annotated[int, BeforeValidator(_whole)]
Number = Annotated[float, BeforeValidator(_number)]
Text = Annotated[str, BeforeValidator(functools.partial(check_text, kind="invalid_text"))]
Stop = Annotated[list[Annotated[Text, Field(min_length=1, max_length=256)]],
                 Field(max_length=MAX_STOP), BeforeValidator(_stop_list)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Options' names -> SamplingParams' (for the fields a client gave)
_CORE_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
               "min_p": "min_p", "stop": "stop", "seed": "seed",
               "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
               "frequency_penalty": "frequency_penalty"}


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
            given=given(self, _CORE_NAMES),
        )


_NO_IMAGES = "images are not supported: this server's models read text only"


class _Generation(_Body):
    """What /api/chat and /api/generate share."""

    model: Annotated[str, Field(min_length=1)]
    stream: bool | None = Field(default=None, description="Absent means true, as Ollama.")
    options: Options | None = None
    keep_alive_s: Annotated[float | None, BeforeValidator(_duration)] = Field(
        default=None, alias="keep_alive", description="How long the model stays loaded "
        "after this request (\"5m\", seconds; -1: forever; 0 with no prompt/messages: "
        "unload it now).")
    truncate: bool | None = Field(default=None, description="Accepted and ignored: nothing "
                                  "is ever truncated; a prompt that does not fit is a 400.")
    shift: bool | None = Field(default=None, description="Accepted and ignored: an answer "
                               "that reaches the context's end stops with length.")
    think: Annotated[bool | Literal["high", "medium", "low"] | None,
                     BeforeValidator(_think)] = Field(
        default=None, description="true (or a level, not applied): the model thinks, its "
        "thinking section in `thinking` (a model that cannot think: 400 \"...\" does not "
        "support thinking); absent or false: a section it writes stays in the content.")
    format: Annotated[OutputFormat | None, BeforeValidator(_format)] = Field(
        default=None, description='"json": any JSON object; a JSON Schema object: JSON '
        "valid against it. Generated under a grammar.")
    logprobs: Annotated[Refused, _refuse((False,), "logprobs are not supported")] = None
    top_logprobs: Annotated[Refused, _refuse((0,), "logprobs are not supported")] = None

    @property
    def streamed(self) -> bool:
        return self.stream is not False

    def sampling(self) -> SamplingParams:
        return (self.options or Options()).sampling()

    def _request(self, model: str, **what: Any) -> GenerationRequest:
        return GenerationRequest(params=self.sampling(), model=model, format=self.format,
                                 split_reasoning=bool(self.think), think=bool(self.think),
                                 **what)


class CalledFunction(_Body):
    name: ToolName
    arguments: dict[str, Any] = Field(default_factory=dict,
                                      description="The call's arguments, an object.")
    index: Whole | None = Field(default=None, description="Accepted and ignored.")


class CallMade(_Body):
    """An assistant turn's call, as Ollama writes it (no id)."""

    function: CalledFunction
    id: str | None = Field(default=None, description="Accepted; ids are made up from the "
                           "call's place in the conversation.")


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: Text | None = ""
    thinking: str | None = Field(default=None, description="Accepted and dropped from the "
                                 "prompt, as Ollama drops earlier turns' thinking.")
    images: Annotated[Refused, _refuse(([],), _NO_IMAGES)] = None
    tool_calls: list[CallMade] | None = Field(default=None, description="An assistant "
                                              "turn's calls.")
    tool_name: str | None = Field(default=None, description="A tool turn: the function "
                                  "whose result it is.")

    @model_validator(mode="after")
    def _calls_from_the_assistant(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise PydanticCustomError("unsupported", "only assistant messages have "
                                      "tool_calls")
        return self


def _messages(turns: list[ChatMessage]) -> tuple[Message, ...]:
    """The history as core messages: a call's id is `call_<turn>_<k>`; a tool message
    answers the previous assistant turn's next unanswered call (of `tool_name`, if it
    names one that is left), or, with none left, gets an id of its own place."""
    out: list[Message] = []
    open_calls: list[ToolCall] = []  # the last assistant turn's calls not yet answered
    for n, m in enumerate(turns):
        text = m.content or ""
        if m.role == "assistant":
            open_calls = [ToolCall(f"call_{n}_{k}", c.function.name,
                                   schema_text(c.function.arguments))
                          for k, c in enumerate(m.tool_calls or ())]
            out.append(Message("assistant", text, tuple(open_calls)))
        elif m.role == "tool":
            named = [c for c in open_calls if c.name == m.tool_name] or open_calls
            call_id = f"call_{n}"
            if named:
                call_id = named[0].id
                open_calls.remove(named[0])  # named may be open_calls itself
            out.append(Message("tool", text, tool_call_id=call_id))
        else:
            out.append(Message(m.role, text))
    return tuple(out)


class ChatRequest(_Generation):
    """POST /api/chat. No messages at all is Ollama's "load the model" call."""

    messages: list[ChatMessage] | None = None
    tools: list[ToolSpec] | None = Field(
        default=None, max_length=128, description="Functions the model may call (OpenAI's "
        "function shape): each call is generated under the offered functions' schemas.")

    @model_validator(mode="after")
    def _tools_named_once(self) -> ChatRequest:
        names = [t.function.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise PydanticCustomError("unsupported", "two tools have the same name")
        return self

    @property
    def loads_only(self) -> bool:
        return not self.messages

    def to_request(self, model: str) -> GenerationRequest:
        return self._request(model, messages=_messages(self.messages or []),
                             tools=tuple(t.to_tool() for t in self.tools or ()))


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
            return self._request(model, prompt=self.prompt)
        turns = [Message("system", self.system)] if self.system else []
        turns.append(Message("user", self.prompt))
        return self._request(model, messages=tuple(turns))


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
