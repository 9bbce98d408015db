"""tokenpipe chat: a terminal chat that streams each answer as it arrives.

Ctrl-C while an answer streams stops that answer (a `cancel` frame) and keeps the chat;
Ctrl-C or Ctrl-D at the prompt leaves. /new starts over, /system TEXT sets the system prompt.
--reasoning shows a thinking section apart (`think> `), --tools FILE offers functions and
shows each call (`call> `), --json-schema FILE holds the answers to a schema, --logprobs N
prints each answer token's log-probability (and N alternatives) after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when a chat starts: building `tokenpipe`'s parser needs no client
    from .client import Client, Generation


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("chat", help="chat in the terminal with a running server")
    p.add_argument("--url", default="ws://127.0.0.1:8000/ws")
    p.add_argument("--api-key")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--reasoning", action="store_true",
                   help="show a thinking section apart from the answer")
    p.add_argument("--tools", metavar="FILE", help="a JSON list of OpenAI function tools")
    p.add_argument("--tool-choice", default=None, help="auto, none, required or a name")
    p.add_argument("--json-schema", metavar="FILE",
                   help="a JSON Schema every answer follows ('{}': any JSON object)")
    p.add_argument("--logprobs", type=int, metavar="N",
                   help="print each token's log-probability and its N likeliest others")
    p.set_defaults(run=run)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    """tokenpipe.v1 params from the flags; ValueError for a file that cannot be used."""
    params: dict[str, Any] = {k: v for k, v in (
        ("temperature", args.temperature), ("max_tokens", args.max_tokens),
        ("seed", args.seed)) if v is not None}
    if args.reasoning:
        params["reasoning_format"] = "auto"
    if args.tools:
        params["tools"] = _json_file(args.tools)
        if args.tool_choice in ("auto", "none", "required"):
            params["tool_choice"] = args.tool_choice
        elif args.tool_choice:
            params["tool_choice"] = {"type": "function", "function": {"name": args.tool_choice}}
    if args.json_schema:
        schema = _json_file(args.json_schema)
        params["response_format"] = (
            {"type": "json_object"} if schema == {} else
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    if args.logprobs is not None:
        params["logprobs"], params["top_logprobs"] = True, args.logprobs
    return params


def _json_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    try:
        params = _params(args)
    except ValueError as exc:
        print(f"tokenpipe chat: error: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner() as runner:
        try:
            client = runner.run(_connect(args.url, args.api_key))
        except OSError as exc:
            print(f"cannot connect to {args.url}: {exc}", file=sys.stderr)
            return 1
        try:
            return _loop(runner, client, args.system, params)
        finally:
            runner.run(client.close())


async def _connect(url: str, api_key: str | None) -> Client:
    from .client import Client

    client = Client(url, api_key=api_key)
    await client.connect()
    return client


def _loop(runner: asyncio.Runner, client: Client, system: str | None,
          params: dict[str, Any]) -> int:
    history: list[dict[str, str]] = []
    model = ", ".join(client.hello.get("models", []))
    print(f"connected to {client.url} ({model}). Ctrl-C stops an answer; Ctrl-D leaves.")
    while True:
        try:
            line = input("\nyou> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not line.strip():
            continue
        if line.strip() == "/new":
            history.clear()
            print("(new conversation)")
            continue
        if line.startswith("/system"):
            system = line[len("/system"):].strip() or None
            print(f"(system prompt {'set' if system else 'cleared'})")
            continue
        if line.strip() in ("/quit", "/exit"):
            return 0
        history.append({"role": "user", "content": line})
        messages = ([{"role": "system", "content": system}] if system else []) + history
        answer = runner.run(_answer(client, messages, params))
        if answer is None:
            history.pop()
            if client._ws is None or client._reader is None or client._reader.done():
                print("connection lost", file=sys.stderr)
                return 1
        else:
            history.append({"role": "assistant", "content": answer})


async def _answer(client: Client, messages: list[dict[str, str]],
                  params: dict[str, Any]) -> str | None:
    from .client import ServerError

    gen: Generation = await client.generate(messages=messages, params=params)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, lambda: asyncio.ensure_future(gen.cancel()))
    channel: str | None = None
    try:
        async for part in gen.parts():
            now = part.get("channel", "content")
            if now != channel or "call_id" in part:  # a new section: its own line
                label = {"reasoning": "think> ", "tool_call": "call> "}.get(now, "bot> ")
                name = f"{part['name']} " if "call_id" in part else ""
                print(("" if channel is None else "\n") + label + name, end="", flush=True)
                channel = now
            print(part["text"], end="", flush=True)
    except ServerError as exc:
        print(f"\n[{exc.code}] {exc.message}", file=sys.stderr)
        return None
    finally:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)
    end = gen.end or {}
    if end.get("finish_reason") == "cancelled":
        print(" [stopped]", end="")
    timing = end.get("timing") or {}
    if timing.get("tokens_per_s"):
        print(f"\n  ({end['usage']['completion_tokens']} tokens, "
              f"first token {timing['ttft_ms']:.0f} ms, {timing['tokens_per_s']:.1f} tok/s)",
              end="")
    if gen.logprobs:
        print("\n  logprobs: " + ", ".join(_scored(e) for e in gen.logprobs), end="")
    print()
    return gen.text


def _scored(entry: dict[str, Any]) -> str:
    """'token' -0.12 [or 'other' -1.5, ...]"""
    others = [f"{t['token']!r} {t['logprob']:.2f}" for t in entry.get("top_logprobs", ())
              if t["token"] != entry["token"]]
    alternatives = f" [or {', '.join(others)}]" if others else ""
    return f"{entry['token']!r} {entry['logprob']:.2f}{alternatives}"
