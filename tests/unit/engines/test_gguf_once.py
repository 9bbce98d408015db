"""The transformers engine's GGUF load builds gguf's tensor-name map once for each
architecture and block count (engines/transformers/gguf_once.py): the remembered map names
every tensor as a fresh one does. (That the load gives the same weights was checked when it
was written: the bundled model's state dict hashed equal with and without it.)"""

from __future__ import annotations

import os

import pytest

gguf = pytest.importorskip("gguf") if not os.environ.get("CI") else __import__("gguf")


def test_the_map_is_built_once_and_names_what_a_fresh_one_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpipe.engines.transformers.gguf_once import build_once

    # gguf's own function (a transformers load earlier in this process has wrapped it)
    fresh = getattr(gguf.get_tensor_name_map, "__wrapped__", gguf.get_tensor_name_map)
    monkeypatch.setattr(gguf, "get_tensor_name_map", fresh)
    build_once()
    build_once()  # idempotent: one cache, not a cache of a cache
    remembered = gguf.get_tensor_name_map
    assert remembered is not fresh and remembered.__wrapped__ is fresh
    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == "llama")
    assert remembered(arch, 30) is remembered(arch, 30)
    assert remembered(arch, 2) is not remembered(arch, 30)
    names = [f"model.layers.{i}.{part}" for i in range(30) for part in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
        "post_attention_layernorm")] + ["model.embed_tokens", "model.norm", "lm_head"]
    built = fresh(arch, 30)
    assert [remembered(arch, 30).get_name(n) for n in names] == [built.get_name(n)
                                                                   for n in names]
    assert all(built.get_name(n) for n in names)


def test_while_a_model_loads_each_file_is_parsed_once(tmp_path: object) -> None:
    from pathlib import Path

    import numpy as np

    from tokenpipe.engines.transformers.gguf_once import read_once

    path = Path(str(tmp_path)) / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    original = gguf.GGUFReader
    with read_once():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again and isinstance(first, original)
        assert first.fields["general.architecture"].contents() == "llama"
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
    assert gguf.GGUFReader is original  # put back after the load
    assert gguf.GGUFReader(path) is not first
