"""A GGUF file's header (quantization, context length, architecture), never its tensors.

Read through llama.cpp with `vocab_only` (the metadata and the vocabulary, no weights:
0.1 s for the bundled model) where llama-cpp-python is installed, else with the `gguf`
package (its reader maps the whole file and builds an object per vocabulary entry: 2.9 s
for the same file, measured side by side).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("tokenpipe.models")

# The quantization as a file name writes it, when the header has none (e.g. "Q4_K_M").
_QUANT_IN_NAME = re.compile(r"(?<![A-Za-z0-9])(I?Q\d+(?:_[A-Z0-9]+)*|F16|BF16|F32)(?![A-Za-z0-9])",
                            re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Header:
    architecture: str | None = None
    quantization: str | None = None
    context_length: int | None = None


def quant_from_name(name: str) -> str | None:
    found = _QUANT_IN_NAME.findall(Path(name).name)
    return found[-1].upper() if found else None


def read_header(path: Path) -> Header:
    """The header's fields; raises ValueError when the file is not a readable GGUF."""
    if importlib.util.find_spec("llama_cpp") is not None:
        meta = _llamacpp_meta(path)
    elif importlib.util.find_spec("gguf") is not None:
        meta = _gguf_meta(path)
    else:
        return Header(quantization=quant_from_name(path.name))
    arch = meta.get("general.architecture")
    ctx = meta.get(f"{arch}.context_length") if arch else None
    quant = _file_type_name(meta.get("general.file_type")) or quant_from_name(path.name)
    return Header(arch, quant, int(ctx) if ctx is not None else None)


def _file_type_name(file_type: Any) -> str | None:
    if file_type is None:
        return None
    try:
        from gguf import LlamaFileType

        return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
    except (ImportError, ValueError):
        pass
    try:
        import llama_cpp as lc
    except ImportError:
        return None
    for key, value in vars(lc).items():
        named = key.startswith("LLAMA_FTYPE_MOSTLY_") or key == "LLAMA_FTYPE_ALL_F32"
        if named and value == int(file_type):
            return key.removeprefix("LLAMA_FTYPE_").removeprefix("MOSTLY_")
    return None


_KEYS = ("general.architecture", "general.file_type")


def _llamacpp_meta(path: Path) -> dict[str, Any]:
    import llama_cpp as lc
    from llama_cpp import _logger as llama_logger

    llama_logger.set_verbose(log.isEnabledFor(logging.DEBUG))  # llama.cpp logs every key
    lc.llama_backend_init()
    params = lc.llama_model_default_params()
    params.vocab_only = True  # the header and the vocabulary; no tensor is read
    model = lc.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ValueError(f"not a GGUF model llama.cpp can read: {path}")
    try:
        out: dict[str, Any] = {}
        buf = ctypes.create_string_buffer(256)
        for key in _KEYS:
            if lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) >= 0:
                out[key] = buf.value.decode(errors="replace")
        arch = out.get("general.architecture")
        if arch:
            key = f"{arch}.context_length"
            if lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) >= 0:
                out[key] = buf.value.decode()
        return out
    finally:
        lc.llama_model_free(model)


def _gguf_meta(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError, struct.error, IndexError...
        raise ValueError(f"not a GGUF file: {path}: {exc}") from None
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key == "general.architecture" or key == "general.file_type" \
                or key.endswith(".context_length"):
            out[key] = field.contents()
    return out
