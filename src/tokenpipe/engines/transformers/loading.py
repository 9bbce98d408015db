"""Finding and loading a model for the transformers engine: a GGUF file, an HF folder or a
hub id, on the device asked for, and the tokens that end a turn."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ...errors import EngineError
from ..base import EngineOptions, bundled_model_path
from .gguf_once import read_once
from .kind import KIND

# Chat-turn terminators that end a generation even where the config names only one EOS.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                "<|end_of_text|>", "</s>")


def load(options: EngineOptions) -> tuple[str, Any, Any, torch.device, torch.dtype]:
    """(source, tokenizer, model on its device in eval mode, device, dtype)."""
    source, gguf = _resolve(options.model)
    device = _device(KIND.read(options.values)["device"])
    dtype = torch.float32 if device.type == "cpu" else (
        torch.bfloat16 if device.type != "cuda" or torch.cuda.is_bf16_supported()
        else torch.float16)
    if options.threads:
        torch.set_num_threads(options.threads)
    extra = {"gguf_file": gguf} if gguf else {}
    try:
        with read_once() if gguf else contextlib.nullcontext():
            tok = AutoTokenizer.from_pretrained(source, **extra)
            model: Any = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **extra)
    except Exception as exc:
        raise EngineError(f"transformers could not load {options.model or source}: "
                          f"{type(exc).__name__}: {exc}") from exc
    model.to(device).eval()
    return source, tok, model, device, dtype


def end_tokens(model: Any, tok: Any) -> frozenset[int]:
    """The ids that end a generation: the configs' EOS and the chat-turn terminators."""
    ids: set[int] = set()
    for eos in (model.generation_config.eos_token_id, tok.eos_token_id):
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(i) for i in eos)
    vocab = tok.get_vocab()
    special = set(tok.all_special_tokens) | set(getattr(tok, "added_tokens_encoder", {}))
    ids.update(vocab[t] for t in _END_OF_TURN if t in special and t in vocab)
    return frozenset(ids)


def model_name(model: str | None) -> str:
    if not model:
        return "SmolLM2-135M-Instruct"
    path = Path(model)
    return path.stem if path.suffix == ".gguf" else path.name or model


def _device(name: str | None) -> torch.device:
    if name in (None, "", "cpu"):
        return torch.device("cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError(f"device {name!r} asked for, but torch sees no CUDA device")
    return torch.device(name)


def _resolve(model: str | None) -> tuple[str, str | None]:
    """(folder or hub id, GGUF file name or None) for from_pretrained."""
    if not model:
        path = bundled_model_path()
        return str(path.parent), path.name
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise EngineError(f"{path} is a file but not a .gguf: give a GGUF file, a model "
                              "folder or a hub id")
        return str(path.parent), path.name
    if path.is_dir():
        return str(path), None
    if path.is_absolute() or model.startswith((".", "~")) or path.suffix == ".gguf":
        raise EngineError(f"model not found: {model}")
    return model, None  # a hub id: needs a network (or a filled cache)
