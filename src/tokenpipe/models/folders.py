"""Folders named in the configuration (`model_dirs`): every *.gguf under them."""

from __future__ import annotations

from pathlib import Path

from .entry import ModelEntry, Scan, check_file, is_model_file


def scan(folder: Path) -> Scan:
    found = Scan()
    if not folder.is_dir():
        found.warnings.append(f"model_dirs: {folder} is not a folder")
        return found
    for path in sorted(folder.rglob("*.gguf")):
        if not is_model_file(path) or not check_file(path, "model_dirs", found):
            continue
        rel = path.relative_to(folder).as_posix()
        found.entries.append(ModelEntry("dir", rel, path,
                                        aliases=(rel.removesuffix(".gguf"),
                                                 path.name.removesuffix(".gguf"))))
    return found
