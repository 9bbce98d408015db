"""An OutputFormat as an llguidance grammar (text that LLMatcher compiles)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import llguidance

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

from ..errors import BadRequest
from ..types import GenerationRequest, OutputFormat

# Whitespace between JSON tokens: what a model writes when it pretty-prints (a newline and
# indentation), bounded per gap, so that a model cannot spend its whole answer on blanks.
WHITESPACE = r"[\x20\x0A\x0D\x09]{0,24}"
_OPTIONS: JsonCompileOptions = {"whitespace_pattern": WHITESPACE}
ANY_OBJECT = '{"type": "object"}'


# An integer with no bound is generated within ±(2**53 - 1), the integers every JSON parser
# (JavaScript's too) reads exactly; a small model otherwise writes digits until max_tokens
# cuts the answer.
INT_MIN, INT_MAX = -(2**53 - 1), 2**53 - 1
_DATA_KEYS = {"enum", "const", "default", "examples"}  # values, not schemas


def bounded(schema: Any) -> Any:
    """The schema with every unbounded integer bounded so: a subset of what it
    admits, so an answer under it still validates against the original."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _DATA_KEYS else bounded(v) for k, v in schema.items()}
    kind = out.get("type")
    if kind == "integer" or (isinstance(kind, list) and kind == ["integer"]):
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = INT_MIN
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = INT_MAX
    return out


def grammar_of(fmt: OutputFormat, param: str = "response_format") -> str:
    """The grammar text for `fmt`; BadRequest naming `param` when its schema is not a JSON
    object. Whether the grammar compiles is the Guides' check (it needs the vocabulary)."""
    schema = ANY_OBJECT if fmt.kind == "json_object" else fmt.schema
    if schema is None:
        raise BadRequest("a json_schema format needs a schema", param=param)
    if schema == "true":  # JSON Schema's boolean forms: any value, or none at all
        schema = "{}"
    elif schema == "false":
        raise BadRequest("the schema false admits no value at all", param=param)
    elif '"integer"' in schema:
        schema = json.dumps(bounded(json.loads(schema)))
    try:
        return str(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=_OPTIONS))
    except ValueError as exc:
        raise BadRequest(f"the JSON schema is not a JSON object: {exc}", param=param) from None


def grammar_for(request: GenerationRequest, *, inside: bool = False
                ) -> tuple[str, str] | None:
    """The grammar an answer to `request` is generated under, and the parameter a client
    set to ask for it (None: free text). `inside`: the prompt opened a thinking section
    (what a thinking budget's grammar starts from: thinking.py)."""
    if request.reasoning_budget is not None:
        from .thinking import thinking_grammar

        param = ("tools" if request.tools else "response_format"
                 if request.format is not None else "reasoning_budget")
        return thinking_grammar(request, inside=inside), param
    if request.tools:
        from .tools import tools_grammar

        return tools_grammar(request), "tools"
    if request.format is not None:
        return grammar_of(request.format), "response_format"
    return None


def schema_text(schema: Any) -> str:
    """A schema as the JSON text OutputFormat keeps (key order as the client sent it)."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
