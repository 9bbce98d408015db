"""An OutputFormat as an llguidance grammar (text that LLMatcher compiles)."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import llguidance

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

from ..errors import BadRequest
from ..types import GenerationRequest, OutputFormat, Tool, ToolChoice
from .schemas import SchemaTooDeep, enforced, measure

# Whitespace between JSON tokens: what a model writes when it pretty-prints (a newline and
# indentation), bounded per gap, so that a model cannot spend its whole answer on blanks.
WHITESPACE = r"[\x20\x0A\x0D\x09]{0,24}"
_OPTIONS: JsonCompileOptions = {"whitespace_pattern": WHITESPACE}
ANY_OBJECT = '{"type": "object"}'
# A request's schemas together: a 2,000-property object compiles in about 1-4 s (the
# 10,000-property one of issue 31 took 15-25 s and ~100 MB); 128 tools of a few keys each
# hold under 1,000 objects.
MAX_SCHEMA_CHARS = 256 * 1024
MAX_SCHEMA_OBJECTS = 2_000
# The library's parser fails mid-answer (a row of 7,607 items, its limit 2,000) on an
# object of 1,900 optional keys: refused before it compiles instead.
MAX_PROPERTIES = 400


def grammar_of(fmt: OutputFormat, param: str = "response_format") -> str:
    """The grammar text for `fmt`; BadRequest naming `param` when its schema is not a JSON
    object. Whether the grammar compiles is the Guides' check (it needs the vocabulary)."""
    schema = ANY_OBJECT if fmt.kind == "json_object" else fmt.schema
    if schema is None:
        raise BadRequest("a json_schema format needs a schema", param=param)
    try:
        parsed = json.loads(schema)
    except (ValueError, RecursionError):
        raise BadRequest("the JSON schema is not JSON", param=param) from None
    if parsed is True:  # JSON Schema's boolean forms: any value, or none at all
        parsed = {}
    elif parsed is False:
        raise BadRequest("the schema false admits no value at all", param=param)
    text = json.dumps(enforced_schema(parsed, param), ensure_ascii=False)
    try:
        return str(llguidance.LLMatcher.grammar_from_json_schema(text, overrides=_OPTIONS))
    except ValueError as exc:
        raise BadRequest(f"the JSON schema is not a JSON object: {exc}", param=param) from None


def enforced_schema(schema: Any, param: str) -> Any:
    """schemas.enforced (objects closed, integers bounded); BadRequest naming `param` for a
    schema nested too deep to walk."""
    try:
        return enforced(schema)
    except SchemaTooDeep as exc:
        raise BadRequest(str(exc), param=param) from None


def grammar_for(request: GenerationRequest, *, inside: bool = False
                ) -> tuple[str, str] | None:
    """The grammar an answer to `request` is generated under, and the parameter a client
    set to ask for it (None: free text). `inside`: the prompt opened a thinking section
    (what a thinking budget's grammar starts from: thinking.py). Derived once for the same
    formats and tools (clients send the same tools every turn; prepare() asks twice): a
    2,000-key schema takes ~15 ms of Python, holding the interpreter."""
    if request.format is None and not request.tools and request.reasoning_budget is None:
        return None
    return _derived(request.format, request.tools, request.tool_choice,
                    request.reasoning_budget, inside)


@functools.lru_cache(maxsize=16)
def _derived(fmt: OutputFormat | None, tools: tuple[Tool, ...], choice: ToolChoice,
             budget: int | None, inside: bool) -> tuple[str, str] | None:
    """grammar_for from the only fields it reads (each hashable; BadRequest not kept)."""
    request = GenerationRequest(prompt="", format=fmt, tools=tools, tool_choice=choice,
                                reasoning_budget=budget)
    check_budget(request)
    if request.reasoning_budget is not None:
        from .thinking import thinking_grammar

        return thinking_grammar(request, inside=inside), grammar_param(request)
    if request.tools:
        from .tools import tools_grammar

        return tools_grammar(request), "tools"
    if request.format is not None:
        return grammar_of(request.format), "response_format"
    return None


def check_budget(request: GenerationRequest) -> None:
    """BadRequest naming the field when the request's schemas together are larger than a
    grammar may be (MAX_SCHEMA_CHARS of text, MAX_SCHEMA_OBJECTS objects), before any
    compile: the compile's time and memory grow with them (docs/security.md)."""
    texts = [t.parameters for t in request.tools]
    if request.format is not None and request.format.schema:
        texts.append(request.format.schema)
    param = grammar_param(request)
    chars = sum(len(t) for t in texts)
    if chars > MAX_SCHEMA_CHARS:
        raise BadRequest(f"the schemas hold {chars} characters; this server compiles at most "
                         f"{MAX_SCHEMA_CHARS} per request", param=param)
    objects = widest = 0
    for text in texts:
        try:
            _, count, wide = measure(json.loads(text))
        except (ValueError, RecursionError):
            continue  # the grammar's own step names what is wrong with it
        objects, widest = objects + count, max(widest, wide)
    if widest > MAX_PROPERTIES:
        raise BadRequest(f"an object declares {widest} properties; this server compiles at "
                         f"most {MAX_PROPERTIES} in one object", param=param)
    if objects > MAX_SCHEMA_OBJECTS:
        raise BadRequest(f"the schemas hold {objects} objects (subschemas); this server "
                         f"compiles at most {MAX_SCHEMA_OBJECTS} per request", param=param)


def grammar_param(request: GenerationRequest) -> str:
    """The field that asked for the request's grammar (what its errors name)."""
    return ("tools" if request.tools else "response_format" if request.format is not None
            else "reasoning_budget")


def schema_text(schema: Any) -> str:
    """A schema as the JSON text OutputFormat keeps (key order as the client sent it)."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
