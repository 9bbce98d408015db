"""Writes tests/fixtures/client_schemas/*.json: the schemas real clients send, captured from
the clients themselves (no network: each library builds its request body locally), so the
tests and scripts/measure_schema_rates.py send exactly those (issue 30).

    python scripts/capture_client_schemas.py

Each file: {"source": how it was made, "name", "description", "schema"}."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "client_schemas"


class Country(BaseModel):
    """Ollama's documented structured-output example (ollama.com/blog/structured-outputs)."""

    name: str
    capital: str
    languages: list[str]


class Pet(BaseModel):
    name: str
    kind: str = Field(description="cat, dog, ...")


class Person(BaseModel):
    """A nested model: pydantic writes the inner one under $defs and points at it."""

    name: str
    age: int
    pets: list[Pet]


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: The city, e.g. Paris
        unit: celsius or fahrenheit
    """
    return f"{city}: 20 {unit}"


def langchain_tool() -> dict[str, Any]:
    """LangChain's @tool, as bind_tools() puts it in a ChatOpenAI request's `tools`."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    bound = ChatOpenAI(model="m", api_key="unused", base_url="http://127.0.0.1:9").bind_tools(
        [tool(get_weather)])
    function: dict[str, Any] = bound.kwargs["tools"][0]["function"]  # type: ignore[attr-defined]
    return {"source": "langchain_core @tool + ChatOpenAI.bind_tools",
            "name": function["name"], "description": function.get("description"),
            "schema": function["parameters"]}


def ollama_tool() -> dict[str, Any]:
    """The `ollama` package's tool from a Python function (it keeps no additionalProperties)."""
    from ollama._utils import convert_function_to_tool

    dumped = convert_function_to_tool(get_weather).model_dump(exclude_none=True)
    function = dumped["function"]
    return {"source": "ollama._utils.convert_function_to_tool (what chat(tools=[fn]) sends)",
            "name": function["name"], "description": function.get("description"),
            "schema": function["parameters"]}


# As Anthropic's tool-use documentation writes a tool (docs.anthropic.com, "Tool use").
ANTHROPIC_DOCS_TOOL = {
    "source": "Anthropic's documentation, tool use (get_weather)",
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "schema": {"type": "object", "properties": {
        "location": {"type": "string",
                     "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                 "description": "The unit of temperature, either 'celsius' or 'fahrenheit'"}},
        "required": ["location"]},
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fixtures = {
        "pydantic_country": {"source": "pydantic Country.model_json_schema() (Ollama's docs)",
                             "name": "Country", "description": None,
                             "schema": Country.model_json_schema()},
        "pydantic_person": {"source": "pydantic Person.model_json_schema() ($defs, $ref)",
                            "name": "Person", "description": None,
                            "schema": Person.model_json_schema()},
        "langchain_get_weather": langchain_tool(),
        "ollama_get_weather": ollama_tool(),
        "anthropic_docs_get_weather": ANTHROPIC_DOCS_TOOL,
    }
    for name, value in fixtures.items():
        (OUT / f"{name}.json").write_text(json.dumps(value, indent=2) + "\n")
        print(name, json.dumps(value["schema"]))


if __name__ == "__main__":
    main()
