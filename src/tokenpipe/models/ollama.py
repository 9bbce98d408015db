"""Ollama's store: manifests naming a GGUF blob (`OLLAMA_MODELS` or ~/.ollama/models).

manifests/HOST/NAMESPACE/MODEL/TAG is a JSON image manifest; its layer of media type
application/vnd.ollama.image.model is the GGUF, stored as blobs/sha256-HEX.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .entry import ModelEntry, Scan, check_file

MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST, DEFAULT_NAMESPACE = "registry.ollama.ai", "library"


def root(environ: Mapping[str, str], home: Path) -> Path:
    custom = environ.get("OLLAMA_MODELS")
    return Path(custom).expanduser() if custom else home / ".ollama" / "models"


def model_name(host: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's short form: llama3.2:1b, user/model:tag, host/ns/model:tag."""
    if host == DEFAULT_HOST:
        return f"{model}:{tag}" if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def scan(store: Path) -> Scan:
    found = Scan()
    manifests = store / "manifests"
    if not manifests.is_dir():
        return found
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        name = model_name(host, namespace, model, tag)
        blob = _model_blob(manifest, store, found)
        if blob is None or not check_file(blob, f"ollama {name}", found):
            continue
        aliases = (name.removesuffix(":latest"),) if tag == "latest" else ()
        found.entries.append(ModelEntry("ollama", name, blob, aliases=aliases))
    return found


def _model_blob(manifest: Path, store: Path, found: Scan) -> Path | None:
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        layers = doc["layers"]
        digests = [layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        found.warnings.append(f"ollama: unreadable manifest {manifest}: "
                              f"{type(exc).__name__}: {exc}")
        return None
    if len(digests) != 1 or not isinstance(digests[0], str) or ":" not in digests[0]:
        found.warnings.append(f"ollama: manifest {manifest} names no single model layer "
                              f"({MODEL_LAYER})")
        return None
    algorithm, _, digest = digests[0].partition(":")
    if not digest.isalnum():
        found.warnings.append(f"ollama: manifest {manifest}: bad digest {digests[0]!r}")
        return None
    return store / "blobs" / f"{algorithm}-{digest}"
