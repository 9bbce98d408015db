"""LM Studio's folders: ~/.lmstudio/models/PUBLISHER/REPO/*.gguf, and the older
~/.cache/lm-studio/models with the same layout."""

from __future__ import annotations

from pathlib import Path

from .entry import ModelEntry, Scan, check_file, is_model_file


def roots(home: Path) -> list[Path]:
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def scan(store: Path) -> Scan:
    found = Scan()
    if not store.is_dir():
        return found
    for path in sorted(store.glob("*/*/*.gguf")):
        if not is_model_file(path) or not check_file(path, "lmstudio", found):
            continue
        publisher, repo, file = path.relative_to(store).parts
        found.entries.append(ModelEntry(
            "lmstudio", f"{publisher}/{repo}/{file}", path,
            aliases=(f"{repo}/{file}", file.removesuffix(".gguf")),
            repo=f"{publisher}/{repo}"))
    return found
