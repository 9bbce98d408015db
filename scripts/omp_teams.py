"""What a second thread that has called llama_decode costs every later decode (compute.py):
one sequence of the bundled model decoded token by token, as the engine opens its contexts
(`--determinism exact` unless --fast), on a thread of its own, A B A B:

  A  nothing else has decoded in this process
  B  another thread decoded once before and lives on (its OpenMP team with it)

    python scripts/omp_teams.py [--tokens 128] [--rounds 2] [--threads 2] [--fast]

Each run is a process of its own (OpenMP's state is per process); it prints tokens/s."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time


def measure(other_thread: bool, tokens: int, threads: int, mode: str) -> float:
    import llama_cpp as lc
    import numpy as np

    from tokenpipe.engines.base import bundled_model_path
    from tokenpipe.engines.llamacpp import exact
    from tokenpipe.engines.llamacpp.context import Context

    lc.llama_backend_init()
    mparams = lc.llama_model_default_params()
    exact.model_params(mode, mparams)
    model = lc.llama_model_load_from_file(str(bundled_model_path()).encode(), mparams)
    context = Context.open(model, mode, cells=8192, shared=False, parallel=8,
                           threads=threads, batch_min=520)
    ctx, mem, batch = context.ctx, context.mem, context.batch
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))

    def decode(rows: list[tuple[int, int]]) -> int:
        for i, (token, pos) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(rows) - 1
        batch.n_tokens = len(rows)
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        logits = lc.llama_get_logits_ith(ctx, len(rows) - 1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))

    prompt = [(97 + 131 * i) % n_vocab for i in range(40)]
    if other_thread:  # decodes once, then waits, alive, until the process ends
        decoded, hold = threading.Event(), threading.Event()

        def once() -> None:
            decode([(t, i) for i, t in enumerate(prompt)])
            lc.llama_memory_seq_rm(mem, 0, -1, -1)
            decoded.set()
            hold.wait()

        threading.Thread(target=once, daemon=True).start()
        decoded.wait()
    rate: list[float] = []

    def run() -> None:
        lc.llama_memory_seq_rm(mem, 0, -1, -1)
        token = decode([(t, i) for i, t in enumerate(prompt)])
        started = time.perf_counter()
        for pos in range(len(prompt), len(prompt) + tokens):
            token = decode([(token, pos)])
        rate.append(tokens / (time.perf_counter() - started))

    worker = threading.Thread(target=run)  # as the engine's decode thread
    worker.start()
    worker.join()
    return rate[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fast", action="store_true", help="--determinism fast's kernels")
    ap.add_argument("--one", choices=("A", "B"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    mode = "fast" if args.fast else "exact"
    if args.one:
        print(measure(args.one == "B", args.tokens, args.threads, mode))
        return
    rates: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for side in ("A", "B"):
            out = subprocess.run([sys.executable, __file__, "--one", side, "--tokens",
                                  str(args.tokens), "--threads", str(args.threads),
                                  *(["--fast"] if args.fast else [])],
                                 capture_output=True, text=True, check=True)
            rates[side].append(float(out.stdout.split()[-1]))
            print(f"{side}: {rates[side][-1]:.1f} tok/s", flush=True)
    a, b = statistics.median(rates["A"]), statistics.median(rates["B"])
    print(f"median A (one decoding thread) {a:.1f} tok/s, B (another thread has decoded) "
          f"{b:.1f} tok/s: B/A {b / a:.2f}x ({mode}, {args.threads} threads)")


if __name__ == "__main__":
    main()
