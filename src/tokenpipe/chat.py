"""tokenpipe chat: a terminal chat that streams each answer as it arrives.

Ctrl-C while an answer streams stops that answer (a `cancel` frame) and keeps the chat;
Ctrl-C or Ctrl-D at the prompt leaves. /new starts over, /system TEXT sets the system prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("temperature", args.temperature),
                                ("max_tokens", args.max_tokens), ("seed", args.seed))
              if v is not None}
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
    print("bot> ", end="", flush=True)
    try:
        async for text in gen:
            print(text, end="", flush=True)
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
    print()
    return gen.text
