"""tokenpipe serve | models | chat | bench: parse flags, call into the package."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .config import ENGINES, Settings, engine_option_list, parse_model_spec
from .engines.kind import Option


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the server (WebSocket, OpenAI API, web UI)",
                       description="Every flag also reads TOKENPIPE_<NAME> from the environment "
                                   "and is a key of the --config file (flag > environment > "
                                   "file > default).")
    p.add_argument("--config", help="a TOML configuration file (docs/configuration.md)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--engine", choices=sorted(ENGINES), help="engine (default llamacpp)")
    p.add_argument("--model", action="append",
                   help="a name `tokenpipe models` lists (smollm2, ollama:llama3.2:1b, "
                        "hf:org/repo/file.gguf), a GGUF path, HF folder or hub id (default: "
                        "bundled SmolLM2); or, repeated, NAME=[ENGINE:]SPEC for several "
                        "models in one server")
    p.add_argument("--chat-template", help="a Jinja chat template file, in place of the "
                                           "model's own")
    p.add_argument("--model-dirs", help="comma-separated folders of GGUF files to look in")
    p.add_argument("--model-id", help="the model name clients see (default: from the file)")
    p.add_argument("--load-on-demand", action="store_true", default=None,
                   help="load each model when a request first names it, not at start")
    p.add_argument("--keep-alive", type=_duration, metavar="DURATION",
                   help="unload a model idle this long (\"5m\", 300; default -1: never)")
    p.add_argument("--max-loaded-models", type=int, metavar="N",
                   help="models in memory at once; the least recently used idle one is "
                        "unloaded to load another (default 0: no limit)")
    p.add_argument("--ctx-size", type=int,
                   help="total context tokens (KV cells) of all sequences (default: 8192; "
                        "llamacpp tiered: twice the model's trained context, at most 16384)")
    p.add_argument("--parallel", type=int, help="sequences decoded together (default 8)")
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    for option in engine_option_list():  # each engine's own, as its kind declares them
        _add_option(p, option)
    p.add_argument("--default-max-tokens", type=int, help="max_tokens when a request has none")
    p.add_argument("--max-queue", type=int, help="requests waiting before 'overloaded'")
    p.add_argument("--max-message-bytes", type=int, help="largest client frame accepted")
    p.add_argument("--max-streams-per-connection", type=int)
    p.add_argument("--slow-client-timeout-s", type=float,
                   help="drop a client that has not read for this long (default 30)")
    p.add_argument("--max-frames-per-second", type=float, help="per connection; 0 = no limit")
    p.add_argument("--max-connections-per-client", type=int, help="open /ws per address")
    p.add_argument("--max-prompt-tokens", type=int, help="longest prompt accepted")
    p.add_argument("--max-n", type=int, help="most choices (n) one OpenAI request may ask "
                   "for (default 8)")
    p.add_argument("--resume-grace-s", type=float, help="how long a resumable stream waits")
    p.add_argument("--state", metavar="URL",
                   help="share resumable streams between replicas in Redis "
                        "(redis://HOST:PORT/DB; default: this process alone)")
    p.add_argument("--state-prefix", metavar="PREFIX",
                   help="the prefix of this deployment's Redis keys (tokenpipe)")
    p.add_argument("--state-lease-s", type=float, metavar="S",
                   help="how long a stream's replica holds it without renewing (3): a replica "
                        "that died is taken over after about this")
    p.add_argument("--state-address", metavar="HOST:PORT",
                   help="where the other replicas reach this one (default: --host and "
                        "--port; this machine's address for 0.0.0.0): the stream of a "
                        "replica that refuses connections is taken over at once")
    p.add_argument("--shutdown-grace-s", type=float, help="how long shutdown lets streams end")
    p.add_argument("--responses-db",
                   help="SQLite file of stored /v1/responses (default: "
                        "~/.local/share/tokenpipe/responses.sqlite3)")
    p.add_argument("--responses-max-age-s", type=float,
                   help="forget stored responses older than this (30 days)")
    p.add_argument("--responses-max-count", type=int,
                   help="keep at most this many stored responses (10000)")
    p.add_argument("--api-key", help="require this key (Authorization: Bearer KEY)")
    p.add_argument("--allowed-origins", help="comma-separated extra browser origins for /ws")
    p.add_argument("--allowed-hosts",
                   help="comma-separated Host names answered besides loopback ones; '*': any "
                        "(default: loopback only when bound to loopback, else any)")
    p.add_argument("--max-body-bytes", type=int,
                   help="largest HTTP request body (default: --max-message-bytes)")
    p.add_argument("--max-header-bytes", type=int, help="largest request head (32768)")
    p.add_argument("--max-headers", type=int, help="most header lines in a request (100)")
    p.add_argument("--header-timeout-s", type=float,
                   help="the request head must arrive within this (10)")
    p.add_argument("--body-timeout-s", type=float,
                   help="the request body must arrive within this (30)")
    p.add_argument("--keep-alive-timeout-s", type=int,
                   help="close an idle keep-alive connection after this (5)")
    p.add_argument("--max-tcp-connections", type=int,
                   help="open connections in all, lowered to fit the fd limit (4096)")
    p.add_argument("--max-tcp-connections-per-client", type=int,
                   help="open connections per client address, WebSockets included "
                        "(512; 0 = no limit)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"], help="log lines as text or JSON")


_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str}


def _add_option(p: argparse.ArgumentParser, option: Option) -> None:
    """An engine's declared option as a flag (engines/kind.py)."""
    if option.kind == "bool":
        p.add_argument(option.flag, action="store_true", default=None, help=option.help)
        return
    kind = _duration if option.kind == "duration" else _TYPES[option.kind]
    p.add_argument(option.flag, type=kind, choices=list(option.choices) or None,
                   metavar=option.metavar, help=option.help)


def _duration(text: str) -> float:
    from .config_file import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)} | {
        o.name for o in engine_option_list()}
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
    models = overrides.pop("model", None) or []
    if any("=" in m for m in models):
        for spec in models:  # fail now, with the usage, rather than at load time
            parse_model_spec(spec, "llamacpp")
        overrides["models"] = tuple(models)
    elif len(models) > 1:
        raise ValueError("several --model values must each be NAME=[ENGINE:]SPEC")
    elif models:
        overrides["model"] = models[0]
    for name in ("allowed_origins", "allowed_hosts", "model_dirs"):
        if isinstance(overrides.get(name), str):
            overrides[name] = tuple(s.strip() for s in overrides[name].split(",") if s.strip())
    return Settings.load(getattr(args, "config", None), **overrides)


def _models_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("models", help="list the GGUF models on this machine",
                       description="Models found in the bundled package, Ollama's store, LM "
                                   "Studio's folders, the Hugging Face cache and model_dirs; "
                                   "each NAME works as serve --model NAME.")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--config", help="a TOML configuration file (for its model_dirs)")
    p.add_argument("--model-dirs", help="comma-separated folders of GGUF files to look in")


def list_models(args: argparse.Namespace, settings: Settings) -> int:
    import os

    from .models import Places
    from .models.listing import write

    try:
        return write(Places(environ=dict(os.environ), model_dirs=settings.model_dirs),
                     as_json=args.json)
    except BrokenPipeError:  # `tokenpipe models | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def serve(settings: Settings) -> None:
    from .model_plans import resolve_plans
    from .server.app import run_server

    try:  # names to files (a download, if any, runs here, before the server starts)
        settings = dataclasses.replace(settings, plans=resolve_plans(settings))
    except (ValueError, ImportError) as exc:  # ModelNotFound, a template, MissingDependency
        print(f"tokenpipe serve: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if settings.state is not None:
        from .server.state import check_reachable

        try:
            check_reachable(settings.state)
        except (RuntimeError, ImportError) as exc:
            print(f"tokenpipe serve: error: {exc}", file=sys.stderr)
            sys.exit(2)
    try:
        run_server(settings)
    except KeyboardInterrupt:  # uvicorn re-raises a caught SIGINT once it has shut down
        sys.exit(130)


def parser() -> argparse.ArgumentParser:
    """The command line: `tokenpipe serve | models | chat | bench` and their options."""
    top = argparse.ArgumentParser(prog="tokenpipe", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _models_parser(sub)
    from .bench import add_parser as add_bench
    from .chat import add_parser as add_chat

    add_chat(sub)
    add_bench(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("serve", "models"):
        try:
            settings = settings_from_args(args)
        except (TypeError, ValueError) as exc:
            print(f"tokenpipe {args.command}: error: {exc}", file=sys.stderr)
            return 2
        if args.command == "models":
            return list_models(args, settings)
        serve(settings)
        return 0
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
