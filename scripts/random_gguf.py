"""A GGUF of a larger llama shape with random weights, to price kernels on it (issue 33:
what verifying k drafted tokens costs on a 1B shape). Its answers are noise; its timings
are the shape's. The tokenizer and chat template are the bundled model's; the weights are
Q4_1 (as the bundled model's; --type Q4_0 or Q8_0), the tied embedding Q8_0, written as
raw blocks (random quants, one fixed scale), so no quantization runs.

    python scripts/random_gguf.py /tmp/llama-1b-random.gguf      # Llama-3.2-1B's shape
    python scripts/bench_speculate.py --price --model /tmp/llama-1b-random.gguf

--vocab N keeps the first N tokens only (and the merges among them): a model of another
vocabulary, which `--draft-model` must refuse (a tiny one: --embd 64 --layers 1 --heads 2
--kv-heads 1 --ff 128).
"""

from __future__ import annotations

import argparse

import gguf
import numpy as np

from tokenpipe.engines.base import bundled_model_path

Q = gguf.GGMLQuantizationType


def blocks(rows: int, cols: int, kind: Q, rng: np.random.Generator) -> np.ndarray:
    """rows x cols weights as raw blocks of `kind` (Q4_0, Q4_1 or Q8_0): random quants, a
    small fixed scale (and minimum), so every value is finite."""
    per = cols // 32
    if kind == Q.Q4_1:
        head = np.array([0.01, -0.08], dtype=np.float16).view(np.uint8)  # d, m
        quants = rng.integers(0, 256, size=(rows, per, 16), dtype=np.uint8)
    elif kind == Q.Q4_0:
        head = np.array([0.01], dtype=np.float16).view(np.uint8)  # d
        quants = rng.integers(0, 256, size=(rows, per, 16), dtype=np.uint8)
    else:
        head = np.array([0.01], dtype=np.float16).view(np.uint8)  # d
        quants = rng.integers(-64, 64, size=(rows, per, 32), dtype=np.int8).view(np.uint8)
    heads = np.broadcast_to(head, (rows, per, head.size))
    return np.concatenate([heads, quants], axis=2).reshape(rows, -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--embd", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=8192)
    ap.add_argument("--type", choices=("Q4_0", "Q4_1", "Q8_0"), default="Q4_1",
                    help="the layers' weights (default Q4_1, as the bundled model's)")
    ap.add_argument("--vocab", type=int, help="the first N tokens only (default: all)")
    args = ap.parse_args()
    source = gguf.GGUFReader(str(bundled_model_path()))

    def field(name: str) -> object:
        return source.fields[name].contents()

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(args.path, "llama")
    writer.add_name(f"random llama {args.embd}x{args.layers}")
    writer.add_block_count(args.layers)
    writer.add_context_length(8192)
    writer.add_embedding_length(args.embd)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.kv_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(args.embd // args.heads)
    tokens: list[str] = list(field("tokenizer.ggml.tokens"))  # type: ignore[call-overload]
    vocab = min(args.vocab or len(tokens), len(tokens))
    kept = set(tokens[:vocab])
    merges = [m for m in field("tokenizer.ggml.merges")  # type: ignore[attr-defined]
              if {*m.split(" ", 1), m.replace(" ", "", 1)} <= kept]
    writer.add_vocab_size(vocab)
    weights = Q[args.type]
    writer.add_file_type({"Q4_0": 2, "Q4_1": 3, "Q8_0": 7}[args.type])  # llama_ftype
    writer.add_tokenizer_model(str(field("tokenizer.ggml.model")))
    writer.add_tokenizer_pre(str(field("tokenizer.ggml.pre")))
    writer.add_token_list(tokens[:vocab])
    writer.add_token_types(list(field("tokenizer.ggml.token_type"))[:vocab])  # type: ignore[call-overload]
    writer.add_token_merges(merges)
    for key, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                     ("unknown", writer.add_unk_token_id),
                     ("padding", writer.add_pad_token_id)):
        add(int(field(f"tokenizer.ggml.{key}_token_id")))  # type: ignore[call-overload]
    writer.add_add_bos_token(False)
    writer.add_chat_template(str(field("tokenizer.chat_template")))
    embd, ff = args.embd, args.ff
    kv = embd // args.heads * args.kv_heads
    writer.add_tensor("token_embd.weight", blocks(vocab, embd, Q.Q8_0, rng), raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    for i in range(args.layers):
        for name, rows, cols in (("attn_q", embd, embd), ("attn_k", kv, embd),
                                 ("attn_v", kv, embd), ("attn_output", embd, embd),
                                 ("ffn_gate", ff, embd), ("ffn_up", ff, embd),
                                 ("ffn_down", embd, ff)):
            writer.add_tensor(f"blk.{i}.{name}.weight", blocks(rows, cols, weights, rng),
                              raw_dtype=weights)
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", np.ones(embd, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.path}")


if __name__ == "__main__":
    main()
