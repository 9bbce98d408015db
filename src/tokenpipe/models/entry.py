"""What a store finds: one entry per model file, and the warnings of what it could not read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .header import quant_from_name

# A split model's shards: llama.cpp loads them all from the first one's path.
SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ModelEntry:
    store: str  # bundled, ollama, lmstudio, hf, dir
    name: str  # the store's own name for it: llama3.2:1b, org/repo/file.gguf
    path: Path
    aliases: tuple[str, ...] = ()  # other bare names that mean it (a file's stem, ...)
    repo: str | None = None  # hf and lmstudio: org/repo, for names that stop at the repo

    @property
    def qualified(self) -> str:
        return f"{self.store}:{self.name}"

    @property
    def quant_in_name(self) -> str | None:
        return quant_from_name(self.path.name if self.store != "ollama" else self.name)


@dataclass(slots=True)
class Scan:
    entries: list[ModelEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: Scan) -> None:
        self.entries.extend(other.entries)
        self.warnings.extend(other.warnings)


def is_model_file(path: Path) -> bool:
    """A GGUF that is a model: not a vision projector, not a later shard of a split one."""
    name = path.name.lower()
    if not name.endswith(".gguf") or name.startswith("mmproj"):
        return False
    shard = SHARD.search(path.name)
    return shard is None or int(shard.group(1)) == 1


def check_file(path: Path, where: str, scan: Scan) -> bool:
    """True when `path` is a readable file; else a warning (a dangling symlink: a download
    that never finished, a blob deleted under the store)."""
    try:
        if path.is_file():
            return True
    except OSError as exc:
        scan.warnings.append(f"{where}: {path}: {exc.strerror or exc}")
        return False
    if path.is_symlink():
        scan.warnings.append(f"{where}: {path} is a dangling symlink (an unfinished "
                             "download or a removed blob)")
    else:
        scan.warnings.append(f"{where}: {path} is not a file")
    return False
