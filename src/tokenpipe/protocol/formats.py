"""`response_format` as OpenAI spells it, the one shape every door that takes a format
accepts (OpenAI chat and completions, tokenpipe.v1 `params`): `{"type": "text"}`,
`{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {"name", "schema",
"strict", "description"}}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..constrain.grammars import schema_text
from ..types import OutputFormat


def _schema(value: Any) -> Any:
    if value is not None and not isinstance(value, dict | bool):
        raise PydanticCustomError("invalid_type", "a JSON Schema is an object (or a boolean)")
    return value


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    json_schema: Annotated[Any, BeforeValidator(_schema)] = Field(
        default=None, alias="schema", description="A JSON Schema (an object, or true / "
        "false); absent: any JSON value.")
    strict: bool | None = Field(default=None, description="Accepted; the schema is always "
                                "enforced, as with strict true.")
    description: str | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise PydanticCustomError(
                "invalid_value", "json_schema is required with type json_schema, and only "
                "there", {"param": "response_format.json_schema"})
        return self

    def to_format(self) -> OutputFormat | None:
        if self.type == "text":
            return None
        if self.type == "json_object":
            return OutputFormat("json_object")
        spec = self.json_schema
        assert spec is not None
        schema = {} if spec.json_schema is None else spec.json_schema
        return OutputFormat("json_schema", schema_text(schema), spec.name, spec.strict)
