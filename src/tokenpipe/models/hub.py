"""`hf:` names missing from the cache: downloaded with huggingface_hub (its progress bar on a
terminal; a connection dropped mid-file is resumed with a Range request), or, with no network
to the hub, an error at once that says so and gives the command that would get the file."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from ..errors import MissingDependency
from .catalog import ModelNotFound
from .entry import SHARD, is_model_file
from .header import quant_from_name

if TYPE_CHECKING:
    from .catalog import Places

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0  # a hub that does not answer a TCP connect in this is "offline"


def split_name(name: str) -> tuple[str, str | None, str | None]:
    """org/repo[/path/file.gguf][:QUANT] -> (repo, file, quant)."""
    base, colon, quant = name.rpartition(":")
    if not colon or quant_from_name(quant) is None:
        base, quant = name, ""
    parts = base.split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise ModelNotFound(f"model 'hf:{name}': expected hf:ORG/REPO[/FILE.gguf][:QUANT]")
    file = "/".join(parts[2:]) or None
    return "/".join(parts[:2]), file, quant or None


def fetch(name: str, places: Places, *, download: bool = True) -> Path:
    repo, file, quant = split_name(name)
    command = _command(repo, file, quant)
    env = places.environ
    if not download or env.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelNotFound(f"model 'hf:{name}' is not in the Hugging Face cache "
                            f"({places.hf_root}) and the hub is offline (HF_HUB_OFFLINE); "
                            f"get it with: {command}")
    endpoint = env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    reason = _unreachable(endpoint)
    if reason:
        raise ModelNotFound(f"model 'hf:{name}' is not in the Hugging Face cache "
                            f"({places.hf_root}) and the hub at {endpoint} cannot be reached "
                            f"({reason}); get it with: {command}")
    try:
        import huggingface_hub as hub
        from huggingface_hub import errors as hub_errors
        from huggingface_hub.utils.tqdm import disable_progress_bars
    except ImportError:
        raise MissingDependency("downloading hf: models needs huggingface_hub: "
                                "pip install huggingface_hub") from None
    if not sys.stderr.isatty():  # a log file gets no progress bar redrawn in place
        disable_progress_bars()
    try:
        if file is None:
            file = _pick(repo, quant, hub.HfApi(endpoint=endpoint).list_repo_files(repo))
        paths = [hub.hf_hub_download(repo, f, cache_dir=places.hf_root, endpoint=endpoint)
                 for f in _shards(file)]
    except (hub_errors.RepositoryNotFoundError, hub_errors.GatedRepoError,
            hub_errors.EntryNotFoundError, hub_errors.LocalEntryNotFoundError,
            hub_errors.HfHubHTTPError, hub_errors.HFValidationError) as exc:
        raise ModelNotFound(f"model 'hf:{name}': {_first_line(exc)}") from None
    except (OSError, httpx.HTTPError) as exc:  # huggingface_hub talks through httpx
        raise ModelNotFound(f"model 'hf:{name}': download failed: {exc}; "
                            f"retry, or get it with: {command}") from None
    return Path(paths[0])


def _pick(repo: str, quant: str | None, files: list[str]) -> str:
    ggufs = [f for f in files if is_model_file(Path(f))]
    if quant:
        ggufs = [f for f in ggufs if (quant_from_name(f) or "").casefold() == quant.casefold()]
    if len(ggufs) == 1:
        return ggufs[0]
    what = f"{quant} GGUF" if quant else "GGUF"
    if not ggufs:
        raise ModelNotFound(f"model 'hf:{repo}{':' + quant if quant else ''}': the repo has no "
                            f"{what} file")
    raise ModelNotFound(f"model 'hf:{repo}' has several {what} files: "
                        f"{', '.join('hf:' + repo + '/' + f for f in ggufs)}; give one of these")


def _shards(file: str) -> list[str]:
    """A split model's every shard, the first first; else the file alone."""
    m = SHARD.search(file)
    if m is None:
        return [file]
    stem, total = file[: m.start()], int(m.group(2))
    return [f"{stem}-{i:05d}-of-{total:05d}.gguf" for i in range(1, total + 1)]


def _unreachable(endpoint: str) -> str | None:
    """Why a TCP connection to the hub fails within PROBE_TIMEOUT_S, else None: without
    this, a machine with no route waits out huggingface_hub's own timeouts and retries."""
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


def _command(repo: str, file: str | None, quant: str | None) -> str:
    if file:
        return f"hf download {repo} {file}"
    pattern = f"*{quant}*.gguf" if quant else "*.gguf"
    return f"hf download {repo} --include '{pattern}'"


def _first_line(exc: Any) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
