"""Clean-call and parse rates on the bundled model with the schemas real clients send
(tests/fixtures/client_schemas), through each official client (issue 30): seeds 0-7, greedy
(temperature 0) and sampled (temperature 0.8), max_tokens 200.

    PYTHONPATH=src python scripts/measure_schema_rates.py [--label after]

Starts its own `tokenpipe serve` on a free port (the source on PYTHONPATH is the one
measured: point it at another checkout for a before/after). A call is clean when the answer
ends as a call (tool_calls / tool_use), every call's arguments parse and validate against
the schema as sent, and hold no key the schema does not declare; a format answer parses when
it ends `stop` and validates, and is clean when it holds no undeclared key either."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import ollama
import openai

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "client_schemas"
MODEL = "SmolLM2-135M-Instruct"
SEEDS = range(8)
MAX_TOKENS = 200


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def undeclared(value: Any, schema: Any, root: Any) -> bool:
    """Whether `value` holds a key no object schema along its path declares."""
    if isinstance(schema, dict) and "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return undeclared(value, target, root)
    if isinstance(value, dict) and isinstance(schema, dict):
        props = schema.get("properties", {})
        return any(k not in props or undeclared(v, props[k], root) for k, v in value.items())
    if isinstance(value, list) and isinstance(schema, dict) and "items" in schema:
        return any(undeclared(v, schema["items"], root) for v in value)
    return False


def judge(text: str | dict[str, Any], schema: dict[str, Any]) -> tuple[bool, bool]:
    """(parses and validates, and holds no undeclared key)."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
        jsonschema.validate(value, schema)
    except (ValueError, jsonschema.ValidationError):
        return False, False
    return True, not undeclared(value, schema, schema)


def sampling(seed: int | None) -> dict[str, Any]:
    return {"temperature": 0.0} if seed is None else {"temperature": 0.8, "seed": seed}


def openai_tools(url: str, seed: int | None) -> tuple[bool, bool]:
    f = fixture("langchain_get_weather")
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    choice = c.chat.completions.create(
        model=MODEL, max_tokens=MAX_TOKENS, messages=[
            {"role": "user", "content": "What is the weather in Paris?"}],
        tools=[{"type": "function", "function": {"name": f["name"], "description":
                                                 f["description"], "parameters": f["schema"]}}],
        tool_choice="required", parallel_tool_calls=False, **sampling(seed)).choices[0]
    calls = choice.message.tool_calls or []
    if choice.finish_reason != "tool_calls" or not calls:
        return False, False
    judged = [judge(call.function.arguments, f["schema"]) for call in calls]  # type: ignore[union-attr]
    return all(v for v, _ in judged), all(c for _, c in judged)


def openai_format(url: str, seed: int | None) -> tuple[bool, bool]:
    f = fixture("pydantic_country")
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    choice = c.chat.completions.create(
        model=MODEL, max_tokens=MAX_TOKENS, messages=[
            {"role": "user", "content": "Tell me about Canada in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "Country",
                                                                "schema": f["schema"]}},
        **sampling(seed)).choices[0]
    if choice.finish_reason != "stop":
        return False, False
    return judge(choice.message.content or "", f["schema"])


def anthropic_tools(url: str, seed: int | None) -> tuple[bool, bool]:
    f = fixture("anthropic_docs_get_weather")
    c = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    params = sampling(seed)
    params.pop("seed", None)  # Anthropic has no seed: sampled runs differ by chance
    m = c.messages.create(
        model=MODEL, max_tokens=MAX_TOKENS, messages=[
            {"role": "user", "content": "What is the weather in San Francisco?"}],
        tools=[{"name": f["name"], "description": f["description"],
                "input_schema": f["schema"]}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body=params)  # this SDK takes temperature only there
    uses = [b for b in m.content if b.type == "tool_use"]
    if m.stop_reason != "tool_use" or not uses:
        return False, False
    judged = [judge(b.input, f["schema"]) for b in uses]  # type: ignore[arg-type]
    return all(v for v, _ in judged), all(c for _, c in judged)


def ollama_format(url: str, seed: int | None) -> tuple[bool, bool]:
    f = fixture("pydantic_country")
    options: dict[str, Any] = {"num_predict": MAX_TOKENS, **sampling(seed)}
    r = ollama.Client(host=url, timeout=300).chat(
        model=MODEL, format=f["schema"], options=options,
        messages=[{"role": "user", "content": "Tell me about Canada in JSON."}])
    if r.done_reason != "stop":
        return False, False
    return judge(r.message.content or "", f["schema"])


def ollama_tools(url: str, seed: int | None) -> tuple[bool, bool]:
    f = fixture("ollama_get_weather")
    options: dict[str, Any] = {"num_predict": MAX_TOKENS, **sampling(seed)}
    r = ollama.Client(host=url, timeout=300).chat(
        model=MODEL, options=options,
        tools=[{"type": "function", "function": {"name": f["name"], "description":
                                                 f["description"], "parameters": f["schema"]}}],
        messages=[{"role": "user", "content": "What is the weather in Paris? Use the tool."}])
    calls = r.message.tool_calls or []
    if r.done_reason != "stop" or not calls:
        return False, False
    judged = [judge(dict(call.function.arguments), f["schema"]) for call in calls]
    return all(v for v, _ in judged), all(c for _, c in judged)


CASES = {
    "openai chat: LangChain bind_tools schema, tool_choice required": openai_tools,
    "openai chat: response_format pydantic Country": openai_format,
    "anthropic messages: docs get_weather tool, tool_choice any": anthropic_tools,
    "ollama chat: format=Country.model_json_schema()": ollama_format,
    "ollama chat: tools=[function] (stripped parameters)": ollama_tools,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--url", help="a running server instead of starting one")
    parser.add_argument("--only", default="", help="the cases whose name holds this")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "tokenpipe", "serve", "--port",
                                   str(port), "--parallel", "4"], env=dict(os.environ),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    try:
        print(f"## {args.label}: valid / clean, of 1 greedy and 8 sampled (seeds 0-7)")
        print("| case | greedy | sampled valid | sampled clean |")
        print("| --- | --- | --- | --- |")
        for name, case in CASES.items():
            if args.only not in name:
                continue
            greedy = case(url, None)
            sampled = [case(url, seed) for seed in SEEDS]
            print(f"| {name} | {'valid' if greedy[0] else 'invalid'}, "
                  f"{'clean' if greedy[1] else 'not clean'} | "
                  f"{sum(v for v, _ in sampled)}/8 | {sum(c for _, c in sampled)}/8 |",
                  flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
