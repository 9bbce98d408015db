"""Every store's models, and names to files: `ollama:llama3.2:1b`, `hf:org/repo/file.gguf`,
`hf:org/repo[:QUANT]`, `lmstudio:publisher/repo/file.gguf`, `dir:file.gguf`,
`bundled:smollm2`, or the same without the prefix when only one file answers to it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import bundled, folders, hf_cache, lmstudio, ollama
from .entry import ModelEntry, Scan
from .header import quant_from_name

STORES = ("bundled", "ollama", "lmstudio", "hf", "dir")
MAX_LISTED = 25  # candidates an error names before "and N more"


class ModelNotFound(ValueError):
    """A model name that names no file, or more than one: the message lists candidates."""


@dataclass(frozen=True, slots=True)
class Places:
    """Where the stores are: from the environment (OLLAMA_MODELS, HF_HUB_CACHE, HF_HOME,
    HOME) and the configuration's model_dirs."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    model_dirs: tuple[str, ...] = ()

    @property
    def home(self) -> Path:
        return Path(self.environ.get("HOME") or Path.home())

    @property
    def hf_root(self) -> Path:
        return hf_cache.root(self.environ, self.home)

    def scan(self, store: str | None = None) -> Scan:
        """The models of one store, or of all; a broken store is warnings, never an error."""
        found = Scan()
        for name in (store,) if store else STORES:
            try:
                found.extend(self._scan(name))
            except OSError as exc:  # an unreadable folder: say so, list the others
                found.warnings.append(f"{name}: {exc.filename or ''}: {exc.strerror or exc}")
        return found

    def _scan(self, store: str) -> Scan:
        if store == "bundled":
            return bundled.scan()
        if store == "ollama":
            return ollama.scan(ollama.root(self.environ, self.home))
        if store == "lmstudio":
            found = Scan()
            for root in lmstudio.roots(self.home):
                found.extend(lmstudio.scan(root))
            return found
        if store == "hf":
            return hf_cache.scan(self.hf_root)
        found = Scan()
        for folder in self.model_dirs:
            found.extend(folders.scan(Path(folder).expanduser()))
        return found


@dataclass(frozen=True, slots=True)
class Resolved:
    path: Path
    name: str  # the model id clients see by default: the name as given, less its store


def split_store(spec: str) -> tuple[str | None, str]:
    store, colon, rest = spec.partition(":")
    return (store, rest) if colon and store in STORES else (None, spec)


def resolve(spec: str, places: Places, *, download: bool = True,
            strict: bool = True) -> Resolved | None:
    """The file a model name means. None when `spec` is no name: an existing path, or (not
    `strict`: the transformers engine takes hub ids) a name no store knows. An unknown or
    ambiguous name raises ModelNotFound listing the candidates; `hf:` names missing from the
    cache are downloaded when `download` (hub.py)."""
    store, name = split_store(spec)
    if store is None and Path(spec).expanduser().exists():
        return None
    if not name:
        raise ModelNotFound(f"model {spec!r}: the name after '{store}:' is empty")
    found = places.scan(store)
    matches = match(name, found.entries)
    if len(matches) == 1:
        return Resolved(matches[0].path, name)
    if len(matches) > 1:
        raise ModelNotFound(f"model {spec!r} is ambiguous: it could be "
                            f"{_listing(e.qualified for e in matches)}; give one of these")
    if store == "hf":
        from . import hub

        return Resolved(hub.fetch(name, places, download=download), name)
    if store is None and not strict:
        return None
    where = f"in the {store} store" if store else "on this machine"
    names = [e.qualified for e in found.entries]
    known = f"models {where}: {_listing(names)}" if names else f"no models found {where}"
    hint = ("a path that exists, or a name `tokenpipe models` lists"
            if store is None else "`tokenpipe models` lists them")
    raise ModelNotFound(f"unknown model {spec!r} ({hint}); {known}")


def match(name: str, entries: Sequence[ModelEntry]) -> list[ModelEntry]:
    """The distinct files that answer to `name`: a store's name or an alias, else a repo
    (hf, lmstudio) with an optional :QUANT suffix."""
    key = name.casefold()
    hits = [e for e in entries if key in {n.casefold() for n in (e.name, *e.aliases)}]
    if not hits:
        repo, colon, quant = name.rpartition(":")
        if not colon or quant_from_name(quant) is None:
            repo, quant = name, ""
        hits = [e for e in entries if e.repo is not None and e.repo.casefold() == repo.casefold()
                and (not quant or (e.quant_in_name or "").casefold() == quant.casefold())]
    return distinct(hits)


def distinct(entries: Iterable[ModelEntry]) -> list[ModelEntry]:
    """One entry per file: the same blob linked into two stores is one model."""
    seen: set[tuple[int, int]] = set()
    out: list[ModelEntry] = []
    for entry in entries:
        try:
            st = entry.path.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(entry)
    return out


def _listing(names: Iterable[str]) -> str:
    items = list(names)
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")
