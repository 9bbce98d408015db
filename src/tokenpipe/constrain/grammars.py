"""An OutputFormat as an llguidance grammar (text that LLMatcher compiles)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import llguidance

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

from ..errors import BadRequest
from ..types import GenerationRequest, OutputFormat
from .schemas import SchemaTooDeep, enforced

# Whitespace between JSON tokens: what a model writes when it pretty-prints (a newline and
# indentation), bounded per gap, so that a model cannot spend its whole answer on blanks.
WHITESPACE = r"[\x20\x0A\x0D\x09]{0,24}"
_OPTIONS: JsonCompileOptions = {"whitespace_pattern": WHITESPACE}
ANY_OBJECT = '{"type": "object"}'


def grammar_of(fmt: OutputFormat, param: str = "response_format") -> str:
    """The grammar text for `fmt`; BadRequest naming `param` when its schema is not a JSON
    object. Whether the grammar compiles is the Guides' check (it needs the vocabulary)."""
    schema = ANY_OBJECT if fmt.kind == "json_object" else fmt.schema
    if schema is None:
        raise BadRequest("a json_schema format needs a schema", param=param)
    try:
        parsed = json.loads(schema)
    except ValueError:
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
    (what a thinking budget's grammar starts from: thinking.py)."""
    if request.reasoning_budget is not None:
        from .thinking import thinking_grammar

        return thinking_grammar(request, inside=inside), grammar_param(request)
    if request.tools:
        from .tools import tools_grammar

        return tools_grammar(request), "tools"
    if request.format is not None:
        return grammar_of(request.format), "response_format"
    return None


def grammar_param(request: GenerationRequest) -> str:
    """The field that asked for the request's grammar (what its errors name)."""
    return ("tools" if request.tools else "response_format" if request.format is not None
            else "reasoning_budget")


def schema_text(schema: Any) -> str:
    """A schema as the JSON text OutputFormat keeps (key order as the client sent it)."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
