"""Each store's on-disk layout, built in a temporary folder around a given GGUF file, as the
tools write them: Ollama's manifests and blobs, LM Studio's PUBLISHER/REPO folders, the
Hugging Face cache's blobs, snapshots and refs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def link(target: Path, at: Path) -> Path:
    """A hard link where the file system allows, else a symlink: the same bytes, no copy."""
    at.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(target, at)
    except OSError:
        at.symlink_to(target)
    return at


def ollama_store(root: Path, gguf: Path, name: str = "smol", tag: str = "latest",
                 namespace: str = "library", host: str = "registry.ollama.ai") -> Path:
    digest = hashlib.sha256(f"{gguf}:{name}:{tag}".encode()).hexdigest()  # the test's own id
    blob = link(gguf, root / "blobs" / f"sha256-{digest}")
    template = root / "blobs" / f"sha256-{'0' * 64}"
    template.write_text("{{ .Prompt }}")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "1" * 64, "size": 10},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
             "size": gguf.stat().st_size},
            {"mediaType": "application/vnd.ollama.image.template",
             "digest": "sha256:" + "0" * 64, "size": 13},
        ],
    }
    path = root / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return blob


def lmstudio_store(root: Path, gguf: Path, publisher: str, repo: str, file: str) -> Path:
    return link(gguf, root / publisher / repo / file)


def hf_cache(root: Path, gguf: Path, repo: str, file: str, revision: str = "a" * 40) -> Path:
    """models--ORG--REPO/{blobs/ETAG, snapshots/REV/FILE -> ../../blobs/ETAG, refs/main}."""
    folder = root / ("models--" + repo.replace("/", "--"))
    etag = hashlib.sha256(f"{repo}/{file}".encode()).hexdigest()
    blob = folder / "blobs" / etag
    if not blob.exists():
        link(gguf, blob)
    snap = folder / "snapshots" / revision / file
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(os.path.relpath(blob, snap.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    return snap


def tiny_gguf(at: Path) -> Path:
    """A distinct file (its own inode) with a GGUF name: enough for name resolution, which
    never opens the file."""
    at.parent.mkdir(parents=True, exist_ok=True)
    at.write_bytes(b"GGUF-not-really")
    return at
