"""The Hugging Face hub cache: models--ORG--REPO/snapshots/REVISION/**.gguf, symlinks into
blobs/ (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .entry import ModelEntry, Scan, check_file, is_model_file


def root(environ: Mapping[str, str], home: Path) -> Path:
    """As huggingface_hub's constants compute it, from `environ` (read per call)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else home / ".cache"
    return cache / "huggingface" / "hub"


def repo_dir(store: Path, repo: str) -> Path:
    return store / ("models--" + repo.replace("/", "--"))


def scan(store: Path) -> Scan:
    found = Scan()
    if not store.is_dir():
        return found
    for folder in sorted(store.glob("models--*--*")):
        org, _, name = folder.name.removeprefix("models--").partition("--")
        repo = f"{org}/{name}"
        for rel, path in _files(folder, found).items():
            if not check_file(path, f"hf {repo}", found):
                continue
            found.entries.append(ModelEntry(
                "hf", f"{repo}/{rel}", path,
                aliases=(Path(rel).name.removesuffix(".gguf"),), repo=repo))
    return found


def _files(folder: Path, found: Scan) -> dict[str, Path]:
    """Each GGUF's path inside the repo -> its file in the revision `main` points to, else
    in the newest snapshot that has it."""
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return {}
    revs = sorted((p for p in snapshots.iterdir() if p.is_dir()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    main = folder / "refs" / "main"
    try:
        head = main.read_text().strip() if main.is_file() else None
    except OSError as exc:
        found.warnings.append(f"hf: {main}: {exc.strerror or exc}")
        head = None
    revs.sort(key=lambda p: p.name != head)  # main's revision first, then newest first
    out: dict[str, Path] = {}
    for rev in revs:
        for path in sorted(rev.rglob("*.gguf")):
            rel = path.relative_to(rev).as_posix()
            if is_model_file(path) and rel not in out:
                out[rel] = path
    return out
