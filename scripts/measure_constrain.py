"""Cost per token of constrained decoding at the bundled model's vocabulary (49,152 tokens),
one sequence, greedy, in this process: no constraint, llguidance's mask (computed, then
applied through the lookup table constrain/guide.py uses), and llama.cpp's own GBNF grammar
sampler (llama-cpp-python's JSON-schema-to-GBNF). Prints microseconds per sampled token,
A B C A B C. How docs/structured-output.md chose the library.

    .venv/bin/python scripts/measure_constrain.py [TOKENS]
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
import warnings

import llama_cpp as lc
import llguidance
import numpy as np
from llama_cpp import _logger
from llama_cpp.llama_grammar import LlamaGrammar

from tokenpipe.constrain.grammars import grammar_of
from tokenpipe.constrain.guide import Guides
from tokenpipe.engines.base import bundled_model_path
from tokenpipe.types import OutputFormat

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1},
    "address": {"type": "object", "properties": {
        "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["city", "zip"]}},
    "required": ["name", "age", "tags", "address"]}
PROMPT = "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n"


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
    warnings.simplefilter("ignore", DeprecationWarning)  # llguidance calls a renamed alias
    _logger.set_verbose(False)
    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(str(bundled_model_path()).encode(),
                                          lc.llama_model_default_params())
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    cparams = lc.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_threads, cparams.n_threads_batch = 2048, 512, 2, 2
    ctx = lc.llama_init_from_model(model, cparams)
    t = time.perf_counter()
    guides = Guides.for_llamacpp(vocab, n_vocab)
    print(f"llguidance tokenizer from the vocabulary: {time.perf_counter() - t:.2f} s")
    batch = lc.llama_batch_init(512, 0, 1)
    prompt = tokenize(vocab, PROMPT)
    for kind in ["none", "llguidance", "gbnf"] * 2:
        compile_ms, per_token_us, n, text = run(kind, ctx, batch, vocab, n_vocab, prompt,
                                                guides, steps)
        print(f"{kind:10s} compile {compile_ms:7.2f} ms  {per_token_us:8.1f} us/token "
              f"over {n} tokens  {text[:60]!r}")


def tokenize(vocab: object, text: str) -> list[int]:
    data = text.encode()
    out = (lc.llama_token * (len(data) + 8))()
    n = lc.llama_tokenize(vocab, data, len(data), out, len(data) + 8, False, True)
    return list(out[:n])


def decode(ctx: object, batch: object, tokens: list[int], pos0: int) -> None:
    batch.n_tokens = len(tokens)  # type: ignore[attr-defined]
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos0 + i, 1  # type: ignore
        batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1  # type: ignore
    assert lc.llama_decode(ctx, batch) == 0


def run(kind: str, ctx: object, batch: object, vocab: object, n_vocab: int,
        prompt: list[int], guides: Guides, steps: int) -> tuple[float, float, int, str]:
    lc.llama_memory_seq_rm(lc.llama_get_memory(ctx), 0, -1, -1)
    decode(ctx, batch, prompt, 0)
    pos, out, spent, n = len(prompt), b"", 0.0, 0
    t = time.perf_counter()
    guide = sampler = None
    if kind == "llguidance":
        guide = guides.start(grammar_of(OutputFormat("json_schema", json.dumps(SCHEMA))))
    elif kind == "gbnf":
        gbnf = LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)._grammar
        sampler = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        lc.llama_sampler_chain_add(sampler, lc.llama_sampler_init_grammar(
            vocab, gbnf.encode(), b"root"))
        lc.llama_sampler_chain_add(sampler, lc.llama_sampler_init_greedy())
    compile_ms = (time.perf_counter() - t) * 1000
    buf = ctypes.create_string_buffer(64)
    for _ in range(steps):
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        t = time.perf_counter()
        if sampler is not None:
            token = lc.llama_sampler_sample(sampler, ctx, -1)
        else:
            if guide is not None:
                guide.constrain(logits)
            token = int(np.argmax(logits))
            if guide is not None:
                assert guide.accept(token), guide.error
        spent += time.perf_counter() - t
        n += 1
        if lc.llama_vocab_is_eog(vocab, token) or (guide is not None and guide.done):
            break
        size = lc.llama_token_to_piece(vocab, token, buf, 64, 0, False)
        out += buf.raw[:size]
        decode(ctx, batch, [token], pos)
        pos += 1
    if sampler is not None:
        lc.llama_sampler_free(sampler)
    return compile_ms, spent / n * 1e6, n, out.decode(errors="replace")


if __name__ == "__main__":
    del llguidance  # imported first: fails early with a clear name when it is missing
    main()
