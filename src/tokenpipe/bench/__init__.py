"""`tokenpipe bench`: cli.py (the flags and the rounds), streams.py (one run of N streams),
ws_load.py and sse_load.py (the loads: tokenpipe.v1, and every HTTP door with apis.py's
request and parser for each), results.py (figures and printing), metrics.py (the server's
own), decode_steps.py and reference.py (llama.cpp in this process)."""

from .cli import add_parser

__all__ = ["add_parser"]
