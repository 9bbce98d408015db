"""tokenpipe bench: N concurrent streams against a server; prints latency and throughput.

    tokenpipe bench --url ws://127.0.0.1:8000/ws -n 8 --max-tokens 128
    tokenpipe bench --api sse --url http://127.0.0.1:8000 -n 1
    tokenpipe bench --api anthropic --url http://127.0.0.1:8000   # or responses, ollama
    tokenpipe bench --compare-apis sse,anthropic,responses,ollama --url http://127.0.0.1:8000
                                                    # every door in turn, A B C D A B C D
    tokenpipe bench --reference llama-cpp-python   # plus the same prompt in-process, A B A B
    tokenpipe bench --compare http://127.0.0.1:8080 # another OpenAI-style server, A B A B
    tokenpipe bench --decode-steps -n 8             # llama.cpp alone: what batching can gain
    tokenpipe bench --json-schema scripts/bench/story.schema.json --format-ab
                                                    # with and without the format, A B A B
    tokenpipe bench --tools scripts/bench/tools.json --format-ab
                                                    # tool calls (required) and free text

Tokens are counted from the usage each API reports; time to first token is measured by
the client from sending the request to receiving the first non-empty text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..server.doors import DOORS, bench_names

DEFAULT_PROMPT = "Write a short story about a robot who learns to paint."
# the doors' names for the bench (server/doors.py: its table, without loading the doors);
# the HTTP ones are apis.py's, not imported here: `tokenpipe serve` builds this parser too
APIS = bench_names(DOORS)
HTTP_APIS = tuple(api for api in APIS if api != "ws")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="measure time to first token and tokens/s",
                       description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default="ws://127.0.0.1:8000/ws",
                   help="ws://HOST:PORT/ws for --api ws, http://HOST:PORT for the others")
    p.add_argument("--api", choices=APIS, default="ws",
                   help="sse: Chat Completions; anthropic: /v1/messages; responses:\n"
                        "/v1/responses; ollama: /api/chat; ws: the WebSocket protocol")
    p.add_argument("--compare-apis", metavar="API,API,...", type=_api_list,
                   help="these APIs against the one server of --url, in turn each round\n"
                        "(A B C D A B C D); the medians give each one's tok/s ratio and\n"
                        "time to first token difference against the first")
    p.add_argument("-n", "--concurrency", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--rounds", type=int, default=3, help="rounds (A B A B with --compare)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--api-key")
    p.add_argument("--model", help="model name to send (needed by some --compare servers)")
    p.add_argument("--compare", help="another OpenAI-style server's base URL, run side by side")
    p.add_argument("--reference", choices=["llama-cpp-python"],
                   help="also run the same prompt in this process with llama-cpp-python's\n"
                        "create_chat_completion(stream=True), one stream, side by side")
    p.add_argument("--model-path", help="GGUF for --reference (default: the bundled model)")
    p.add_argument("--threads", type=int)
    p.add_argument("--json", action="store_true", help="print one JSON object per run")
    p.add_argument("--procs", type=int, default=1,
                   help="spread the clients over this many processes (for gateway loads)")
    p.add_argument("--decode-steps", action="store_true",
                   help="no server: time llama.cpp's batched decode alone in this process\n"
                        "for 1, 2, 4 ... -n sequences (--model-path, --threads); the\n"
                        "most -n streams can gain over one on this machine and model")
    p.add_argument("--json-schema", metavar="FILE",
                   help="ask for output under this JSON Schema (response_format json_schema)")
    p.add_argument("--tools", metavar="FILE",
                   help="offer these tools (a JSON list of OpenAI tools) with tool_choice\n"
                        "required: every answer is tool calls")
    p.add_argument("--format-ab", action="store_true",
                   help="with --json-schema or --tools: each round runs the server without,\n"
                        "then with, the format or tools (what constraining costs, side by side)")
    p.add_argument("--same-prompt", action="store_true",
                   help="with --tools --format-ab: the free side gets the tools' generic\n"
                        "system section as its system message (what a chat template without\n"
                        "`tools`, the bundled model's, renders), so both decode one prompt\n"
                        "and the difference is the grammar's")
    p.add_argument("--resumable", action="store_true",
                   help="ws and sse: resumable streams (what --state redis logs; compare a\n"
                        "server with --state against one without: --compare URL)")
    p.add_argument("--idle", type=int, metavar="N",
                   help="open N idle connections and report the server's memory per 1,000")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Each mode imports what it drives: `tokenpipe serve` builds this parser too.
    if args.decode_steps:
        from .decode_steps import decode_steps

        return decode_steps(args)
    if args.idle:
        from .ws_load import idle_connections

        return asyncio.run(idle_connections(args))
    return asyncio.run(_rounds(args))


async def _rounds(args: argparse.Namespace) -> int:
    """Warm-up, then every target once a round, the order rotated each round, then the
    medians."""
    from .results import RunResult, print_medians, print_run
    from .streams import server_run

    messages = [{"role": "user", "content": args.prompt}]
    label = f"tokenpipe-{args.api}"
    args.response_format = _response_format(args.json_schema)
    args.tool_list = _tools(args.tools)
    targets: list[tuple[str, Callable[[], Awaitable[RunResult]]]] = [
        (label, lambda: server_run(label, args.api, args.url, args, messages))]
    apis = args.compare_apis or [args.api]
    if (args.response_format is not None or args.tool_list is not None) and any(
            api not in ("ws", "sse") for api in apis):
        raise SystemExit("--json-schema and --tools are for --api ws and sse only")
    if args.compare_apis:
        if args.format_ab:
            raise SystemExit("--compare-apis and --format-ab: one comparison at a time")
        targets = [_api_target(api, args, messages) for api in args.compare_apis]
    if args.format_ab:
        if args.response_format is None and args.tool_list is None:
            raise SystemExit("--format-ab needs --json-schema FILE or --tools FILE")
        free = argparse.Namespace(**{**vars(args), "response_format": None,
                                     "tool_list": None})
        kind = label + ("-tools" if args.tool_list is not None else "-schema")
        free_messages = messages
        if args.same_prompt and args.tool_list is not None:
            free_messages = _with_tools_section(messages, args.tool_list)
        targets.insert(0, (label + "-free", lambda: server_run(
            label + "-free", args.api, args.url, free, free_messages)))
        targets[1] = (kind, lambda: server_run(kind, args.api, args.url, args, messages))
    if args.reference:  # in this process, while the server idles: A B A B
        from .reference import reference_run, reference_thread

        targets.append(("llama-cpp-python", lambda: asyncio.wrap_future(
            reference_thread().submit(reference_run, args, messages))))
    if args.compare:
        targets.append(("compare", lambda: server_run(
            "compare", "sse", args.compare, args, messages)))
    for _label, fn in targets:
        for _ in range(args.warmup):
            await fn()
    results: dict[str, list[RunResult]] = {}
    for r in range(args.rounds):
        # each target takes each place of a round in turn (A B, B A; A B C, B C A, C A B):
        # the first run of a round measured slower, whatever it ran (about 0.85x)
        shift = r % len(targets)
        for name, fn in targets[shift:] + targets[:shift]:
            result = await fn()
            results.setdefault(name, []).append(result)
            print_run(result, args.json)
    print_medians(results)
    return 0


def _api_list(text: str) -> list[str]:
    apis = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in apis if a not in APIS]
    if unknown or len(apis) < 2 or len(set(apis)) != len(apis):
        raise argparse.ArgumentTypeError(
            f"two or more different APIs of {', '.join(APIS)}, comma-separated: {text!r}")
    return apis


def _api_target(api: str, args: argparse.Namespace, messages: list[dict[str, str]]
                ) -> tuple[str, Callable[[], Awaitable[Any]]]:
    """One API of --compare-apis: its label and its run, on the server of --url."""
    from .metrics import base_url
    from .streams import server_run

    url = base_url(args.url)
    if api == "ws":
        url = url.replace("http", "ws", 1) + "/ws"
    label = f"tokenpipe-{api}"
    return label, lambda: server_run(label, api, url, args, messages)


def _response_format(path: str | None) -> dict[str, Any] | None:
    """--json-schema FILE as OpenAI's response_format (tokenpipe.v1 takes the same)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--json-schema {path}: {exc}") from None
    return {"type": "json_schema", "json_schema": {"name": "bench", "schema": schema}}


def _tools(path: str | None) -> list[dict[str, Any]] | None:
    """--tools FILE: a JSON list of OpenAI tools (tokenpipe.v1 takes the same)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tools = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--tools {path}: {exc}") from None
    if not isinstance(tools, list) or not tools:
        raise SystemExit(f"--tools {path}: not a non-empty JSON list of tools")
    return tools


def _with_tools_section(messages: list[dict[str, str]], tools: list[dict[str, Any]]
                        ) -> list[dict[str, str]]:
    """The messages as the server writes them for a template without `tools`: the tools'
    generic system section first (constrain/tools.py, the server's own function)."""
    from ..constrain.tools import chat_messages
    from ..protocol.formats import ToolSpec
    from ..types import GenerationRequest, Message

    request = GenerationRequest(
        messages=tuple(Message(m["role"], m["content"]) for m in messages),  # type: ignore[arg-type]
        tools=tuple(ToolSpec.model_validate(t).to_tool() for t in tools))
    rendered, _ = chat_messages(request, False)
    return [{"role": m["role"], "content": m["content"]} for m in rendered]
