"""A client's JSON Schema as the grammar enforces it: the one place where tokenpipe reads a
schema differently from the letter of JSON Schema, so that a small model cannot write
forever and a schema means what its author meant (docs/structured-output.md).

- **Closed objects.** An object schema with `properties` and no `additionalProperties`
  admits no other keys, as llama.cpp's converter (llama-server, Ollama), xgrammar and
  outlines read it; `additionalProperties: true` or a schema keeps extra keys. JSON Schema
  itself admits any extra key there, and a model then invents keys until max_tokens.
  `allOf` branches are merged as llama.cpp merges them: the node holding them admits the
  union of their properties, each branch stays open to its siblings' keys.
- **Bounded integers.** An integer with no bound is generated within ±(2**53 - 1), the
  integers every JSON parser (JavaScript's too) reads exactly.

`enforced(schema)` returns a new schema; the caller's is never changed. Both narrowings
admit a subset of what the schema admits, so an answer still validates against it as sent.
"""

from __future__ import annotations

from typing import Any

INT_MIN, INT_MAX = -(2**53 - 1), 2**53 - 1
MAX_DEPTH = 128  # JSON nesting of a schema (a property's schema is two levels down)

_SCHEMA = ("additionalProperties", "items", "additionalItems", "contains", "propertyNames",
           "not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions",
                "dependentSchemas", "dependencies")


class SchemaTooDeep(ValueError):
    """The schema nests deeper than MAX_DEPTH."""


def depth(value: Any) -> int:
    """How deep `value` (parsed JSON) nests, counted without recursion (a hostile schema
    may nest thousands deep)."""
    return measure(value)[0]


def measure(value: Any) -> tuple[int, int, int]:
    """(how deep `value` nests, how many objects it holds, the most `properties` one
    object declares), without recursion."""
    deepest, objects, widest, stack = 0, 0, 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            objects += 1
            if isinstance(item.get("properties"), dict):
                widest = max(widest, len(item["properties"]))
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest, objects, widest


def enforced(schema: Any) -> Any:
    """`schema` (parsed JSON) as the grammar enforces it: objects closed, integers bounded.
    SchemaTooDeep past MAX_DEPTH (checked first, so the walk below stays shallow)."""
    if depth(schema) > MAX_DEPTH:
        raise SchemaTooDeep(f"the schema nests deeper than {MAX_DEPTH} levels")
    return _walk(schema, schema, merged=False)


def _walk(node: Any, root: Any, *, merged: bool) -> Any:
    """A copy of `node` with its subschemas walked; `merged`: a branch of a multi-branch
    allOf, left open (the node holding the allOf is closed over all branches' keys)."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _SCHEMA:
        if isinstance(out.get(key), dict):
            out[key] = _walk(out[key], root, merged=False)
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_walk(item, root, merged=False) for item in out[key]]
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _walk(sub, root, merged=False) for name, sub in out[key].items()}
    branches = node.get("allOf")
    if isinstance(branches, list) and len(branches) > 1:
        _merge_all_of(out, branches, root)
    elif (not merged and isinstance(out.get("properties"), dict)
          and "additionalProperties" not in out and "unevaluatedProperties" not in out):
        out["additionalProperties"] = False
    kind = out.get("type")
    if kind == "integer" or kind == ["integer"]:
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = INT_MIN
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = INT_MAX
    return out


def _merge_all_of(out: dict[str, Any], branches: list[Any], root: Any) -> None:
    """Closes a node with several allOf branches over the union of their keys, as llama.cpp
    merges them; each branch (a local $ref inlined, so its target stays closed elsewhere)
    is walked open to its siblings' keys."""
    opened = []
    for branch in branches:
        target = _resolve(branch, root)
        opened.append(_walk(target, root, merged=True) if isinstance(target, dict) else branch)
    out["allOf"] = opened
    names = [n for b in opened if isinstance(b, dict) and isinstance(b.get("properties"), dict)
             for n in b["properties"]]
    own = out.get("properties")
    if ("additionalProperties" in out or "unevaluatedProperties" in out
            or not (names or isinstance(own, dict))):
        return
    own = own if isinstance(own, dict) else {}
    out["properties"] = {**{n: {} for n in names if n not in own}, **own}
    out["additionalProperties"] = False


def _resolve(branch: Any, root: Any) -> Any:
    """A branch that is only a local `$ref` ("#/$defs/X"): its target; else the branch."""
    if not (isinstance(branch, dict) and set(branch) == {"$ref"}
            and isinstance(branch["$ref"], str) and branch["$ref"].startswith("#/")):
        return branch
    target = root
    for part in branch["$ref"][2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return branch  # the library names a broken pointer better
        target = target[part]
    return target
