"""Forced tool calls on the bundled model through each official client (issue 30 item 2):
how many answers are one clean call, on a server of a given checkout. Seeds 0-7 sampled
(temperature 0.8) and one greedy run, max_tokens 200; the schemas are the ones clients send
(tests/fixtures/client_schemas).

    git worktree add --detach /tmp/before30 a6b2460      # the checkout before the change
    python scripts/measure_tool_calls.py --src /tmp/before30/src --label before
    python scripts/measure_tool_calls.py --src src --label after

Starts `tokenpipe serve` from `--src` (on PYTHONPATH, with this venv's packages) on a free
port, or measures `--url`. An answer is clean when it holds exactly one call, ends as a
call (`tool_calls`, `tool_use`, Responses `completed`, the Agents SDK's run returning the
tool's result) and the call's arguments validate against the schema as sent with no key it
does not declare. Also counted: answers with more than one call, and answers cut by the
token limit (the client's error counts as one: `LengthFinishReasonError`,
`ModelBehaviorError`). The requests leave `parallel_tool_calls` out, as the clients do."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_schema_rates import MODEL, SEEDS, fixture, free_port, judge

MAX_TOKENS = 200
ASK = "What is the weather in Paris?"


@dataclass
class Outcome:
    calls: int = 0  # calls the answer held
    as_call: bool = False  # it ended as a call
    valid: bool = False  # every call's arguments validate, no undeclared key
    length: bool = False  # the token limit cut it (or the client raised for that)

    @property
    def clean(self) -> bool:
        return self.calls == 1 and self.as_call and self.valid


def sampling(seed: int | None) -> dict[str, Any]:
    return {"temperature": 0.0} if seed is None else {"temperature": 0.8, "seed": seed}


def _judged(arguments: list[Any], schema: dict[str, Any]) -> bool:
    return bool(arguments) and all(all(judge(a, schema)) for a in arguments)


def _weather() -> tuple[dict[str, Any], dict[str, Any]]:
    f = fixture("langchain_get_weather")  # LangChain @tool + bind_tools: no additionalProperties
    return f, {"type": "function", "function": {"name": f["name"], "description":
                                                f["description"], "parameters": f["schema"]}}


def _chat(url: str, seed: int | None, choice: Any) -> Outcome:
    f, tool = _weather()
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    answer = c.chat.completions.create(model=MODEL, max_tokens=MAX_TOKENS, tools=[tool],
                                       messages=[{"role": "user", "content": ASK}],
                                       tool_choice=choice, **sampling(seed)).choices[0]
    calls = answer.message.tool_calls or []
    return Outcome(len(calls), answer.finish_reason == "tool_calls",
                   _judged([k.function.arguments for k in calls], f["schema"]),  # type: ignore[union-attr]
                   answer.finish_reason == "length")


def chat_named(url: str, seed: int | None) -> Outcome:
    return _chat(url, seed, {"type": "function", "function": {"name": "get_weather"}})


def chat_required(url: str, seed: int | None) -> Outcome:
    return _chat(url, seed, "required")


def chat_stream_helper(url: str, seed: int | None) -> Outcome:
    f, tool = _weather()
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    try:
        with c.chat.completions.stream(
                model=MODEL, max_tokens=MAX_TOKENS, tools=[tool],
                messages=[{"role": "user", "content": ASK}],
                tool_choice={"type": "function", "function": {"name": "get_weather"}},
                **sampling(seed)) as stream:
            answer = stream.get_final_completion().choices[0]
    except openai.LengthFinishReasonError:
        return Outcome(length=True)
    calls = answer.message.tool_calls or []
    return Outcome(len(calls), answer.finish_reason == "tool_calls",
                   _judged([k.function.arguments for k in calls], f["schema"]),  # type: ignore[union-attr]
                   answer.finish_reason == "length")


def responses_required(url: str, seed: int | None) -> Outcome:
    f, _ = _weather()
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    params = sampling(seed)
    extra = {"seed": params.pop("seed")} if "seed" in params else {}
    r = c.responses.create(model=MODEL, max_output_tokens=MAX_TOKENS, input=ASK,
                           tools=[{"type": "function", "name": f["name"], "description":
                                   f["description"], "parameters": f["schema"]}],
                           tool_choice="required", extra_body=extra, **params)
    calls = [o for o in r.output if o.type == "function_call"]
    return Outcome(len(calls), r.status == "completed",
                   _judged([k.arguments for k in calls], f["schema"]),  # type: ignore[union-attr]
                   r.status == "incomplete")


def agents_required(url: str, seed: int | None) -> Outcome:
    from agents import (
        Agent,
        ModelBehaviorError,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return f"Sunny in {city}"

    async def run() -> Outcome:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                                    timeout=300)
        params = sampling(seed)
        settings = ModelSettings(tool_choice="required", temperature=params["temperature"],
                                 max_tokens=MAX_TOKENS,
                                 extra_body={"seed": seed} if seed is not None else None)
        agent = Agent(name="weather", instructions="Answer with the weather tool.",
                      tools=[get_weather], tool_use_behavior="stop_on_first_tool",
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                      model_settings=settings)
        try:
            result = await Runner.run(agent, ASK, max_turns=2)
        except ModelBehaviorError:
            return Outcome(calls=len(called), length=True)
        finally:
            await client.close()
        done = result.final_output == f"Sunny in {called[0]}" if called else False
        return Outcome(len(called), done, done)

    return asyncio.run(run())


def anthropic_any(url: str, seed: int | None) -> Outcome:
    f = fixture("anthropic_docs_get_weather")
    c = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    params = sampling(seed)
    params.pop("seed", None)  # Anthropic has no seed: sampled runs differ by chance
    m = c.messages.create(model=MODEL, max_tokens=MAX_TOKENS,
                          messages=[{"role": "user", "content": ASK}],
                          tools=[{"name": f["name"], "description": f["description"],
                                  "input_schema": f["schema"]}],
                          tool_choice={"type": "any"}, extra_body=params)
    uses = [b for b in m.content if b.type == "tool_use"]
    return Outcome(len(uses), m.stop_reason == "tool_use",
                   _judged([b.input for b in uses], f["schema"]),  # type: ignore[union-attr]
                   m.stop_reason == "max_tokens")


def langchain_required(url: str, seed: int | None) -> Outcome:
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Get the current weather in a city.

        Args:
            city: The city, e.g. Paris
            unit: celsius or fahrenheit
        """
        return "sunny"

    schema = convert_to_openai_tool(get_weather)["function"]["parameters"]  # as sent

    params = sampling(seed)
    llm = ChatOpenAI(base_url=url + "/v1", api_key="x", model=MODEL,  # type: ignore[arg-type]
                     max_tokens=MAX_TOKENS, max_retries=0, timeout=300, **params)
    message = llm.bind_tools([get_weather], tool_choice="required").invoke(ASK)
    reason = message.response_metadata.get("finish_reason")
    calls = message.tool_calls  # type: ignore[attr-defined]
    return Outcome(len(calls), reason == "tool_calls",
                   _judged([dict(k["args"]) for k in calls], schema), reason == "length")


CASES: dict[str, Callable[[str, int | None], Outcome]] = {
    "openai chat, named tool_choice": chat_named,
    "openai chat, tool_choice required": chat_required,
    "openai chat.completions.stream() helper, named tool": chat_stream_helper,
    "LangChain bind_tools(tool_choice=required)": langchain_required,
    "openai responses, tool_choice required": responses_required,
    "Agents SDK Responses model, tool_choice required": agents_required,
    "anthropic messages, tool_choice any": anthropic_any,
}


def serve(src: str) -> tuple[subprocess.Popen[bytes], str]:
    """`tokenpipe serve` from `src`, its stored Responses in a file of its own (a checkout
    of another age may not read the user's)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = Path(tempfile.mkdtemp(prefix="measure-tool-calls-")) / "responses.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()),
           "TOKENPIPE_RESPONSES_DB": str(store)}
    proc = subprocess.Popen([sys.executable, "-m", "tokenpipe", "serve", "--port", str(port),
                             "--parallel", "4"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server of {src} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default="src", help="the checkout's src folder to serve")
    parser.add_argument("--url", help="a running server instead of starting one")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--only", default="", help="the cases whose name holds this")
    parser.add_argument("--json", help="also write the counts to this file")
    args = parser.parse_args()
    server, url = (None, args.url) if args.url else serve(args.src)
    rows = {}
    try:
        print(f"## {args.label}: clean calls of 1 greedy and 8 sampled (seeds 0-7)")
        print("| case | greedy | sampled clean | sampled several calls | sampled cut by length |")
        print("| --- | --- | --- | --- | --- |")
        for name, case in CASES.items():
            if args.only not in name:
                continue
            greedy = case(url, None)
            sampled = [case(url, seed) for seed in SEEDS]
            row = {"greedy": {"calls": greedy.calls, "clean": greedy.clean,
                              "length": greedy.length},
                   "clean": sum(o.clean for o in sampled),
                   "several": sum(o.calls > 1 for o in sampled),
                   "length": sum(o.length for o in sampled)}
            rows[name] = row
            said = ("clean" if greedy.clean else
                    f"{greedy.calls} calls" + (", length" if greedy.length else ""))
            print(f"| {name} | {said} | {row['clean']}/8 | {row['several']}/8 | "
                  f"{row['length']}/8 |", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    if args.json:
        Path(args.json).write_text(json.dumps({"label": args.label, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
