"""Checkpoints by Hugging Face model id: ``albert/albert-base-v2`` or ``org/name@revision`` is
fetched with huggingface_hub into its cache and used as a local checkpoint directory.

Only what a checkpoint needs is fetched (config.json, safetensors weights, the tokenizer; the
pickle-based pytorch_model.bin only when there is no safetensors file, and it is then read with
``torch.load(weights_only=True)`` like any other). HF_ENDPOINT, HF_HOME / HF_HUB_CACHE and
HF_HUB_OFFLINE are honoured; offline, or with the hub out of reach, the cached copy is used.
An existing local path always wins, then a preset name, then a hub id. Device side: no torch,
no tensorflow; huggingface_hub is imported only when a hub id is resolved."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from .config import PRESETS
from .errors import CheckpointError, optional_import

__all__ = ["CHECKPOINT_FILES", "is_hub_id", "resolve", "repo_name"]

log = logging.getLogger(__name__)

# org/name in the hub's characters, then an optional @revision (branch, tag or commit; may hold "/").
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@(?P<revision>[^\s@]+))?")
# Not model names: a missing "dir/model.onnx" is a mistyped local file, not a model to look up.
_FILE_SUFFIXES = (".onnx", ".tflite", ".ort", ".pte", ".json", ".jsonl", ".model", ".bin", ".safetensors", ".index",
                  ".git")
# What checkpoints.load reads from a Hugging Face directory, besides the fallback weights below.
CHECKPOINT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors",
                    "spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_PICKLED_WEIGHTS = "pytorch_model.bin"
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", _PICKLED_WEIGHTS)
_TRUE = ("1", "ON", "YES", "TRUE")
# Presets with a published checkpoint of the same shape.
_PUBLISHED = {name: f"albert/{name}" for name in PRESETS if name.startswith("albert-")}


def is_hub_id(text: str | os.PathLike) -> bool:
    """Whether ``text`` names a model on the Hugging Face hub (``org/name``, ``org/name@revision``):
    never an existing local path or a preset name."""
    text = os.fspath(text)
    match = _HUB_ID.fullmatch(text)
    if match is None or text in PRESETS or _is_local(text):
        return False
    repo = match["repo"]
    return "--" not in repo and ".." not in repo and not repo.lower().endswith(_FILE_SUFFIXES)


def repo_name(hub_id: str) -> str:
    """The model's own name in a hub id: ``albert-base-v2`` for ``albert/albert-base-v2@main``."""
    return _split(hub_id)[0].split("/")[1]


def resolve(source: str | os.PathLike, *, config_only: bool = False) -> Path:
    """The local directory of ``source``. A hub id is fetched into the Hugging Face cache (with
    ``config_only``, its config.json alone) and its snapshot directory returned; anything else
    comes back as the path it names. A preset name where weights are needed is refused with the
    hub id to give instead. Raises CheckpointError, one line naming the id, when the model cannot
    be had."""
    text = os.fspath(source)
    if not is_hub_id(text):
        if text in PRESETS and not config_only and not _is_local(text):
            hint = f"give its hub id, {_PUBLISHED[text]}" if text in _PUBLISHED else "give a checkpoint"
            raise CheckpointError(f"{text} is a preset, a model shape without weights: to use a trained model, {hint}")
        return Path(source)
    repo_id, revision = _split(text)
    folder = _download(text, repo_id, revision, ["config.json"] if config_only else list(CHECKPOINT_FILES))
    if not config_only and not any(folder.glob("*.safetensors")):
        folder = _download(text, repo_id, folder.name, [_PICKLED_WEIGHTS])  # folder.name is the commit
    if not (folder / "config.json").is_file():
        missing = "config.json"
    elif not config_only and not any((folder / name).is_file() for name in _WEIGHTS):
        missing = "model.safetensors or pytorch_model.bin"
    else:
        return folder
    where = "its copy in the Hugging Face cache" if _settings()[2] else "the model on the hub"
    raise CheckpointError(f"{text}: {where} has no {missing}: not an ALBERT checkpoint in Hugging Face format")


def _is_local(text: str) -> bool:
    return Path(text).exists() or Path(text + ".index").exists()  # a TF checkpoint prefix


def _split(text: str) -> tuple[str, str | None]:
    match = _HUB_ID.fullmatch(text)
    if match is None:
        raise CheckpointError(f"{text} is not a Hugging Face model id (org/name or org/name@revision)")
    return match["repo"], match["revision"]


def _settings() -> tuple[str | None, str | None, bool]:
    """HF_ENDPOINT, the hub cache and HF_HUB_OFFLINE as they are now: huggingface_hub reads its
    own copies once, when it is first imported."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or (os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None)
    offline = (env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").strip().upper() in _TRUE
    return (env.get("HF_ENDPOINT") or "").rstrip("/") or None, cache, offline


def _download(text: str, repo_id: str, revision: str | None, patterns: list[str]) -> Path:
    try:
        hf = optional_import("huggingface_hub")
    except ImportError:
        raise CheckpointError(f"{text}: fetching a model from the Hugging Face hub needs huggingface_hub "
                              "(pip install huggingface_hub)") from None
    from huggingface_hub import constants
    from huggingface_hub.utils import tqdm

    class TerminalBar(tqdm):
        """huggingface_hub's own progress bar, drawn only on a terminal (tqdm's disable=None)."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("disable", None)
            super().__init__(*args, **kwargs)

    endpoint, cache, offline = _settings()
    offline = offline or constants.is_offline_mode()  # as it was when huggingface_hub was imported
    log.info("%s: fetching %s%s", text, ", ".join(patterns), " from the cache (offline)" if offline else "")
    try:
        return Path(hf.snapshot_download(repo_id, revision=revision, allow_patterns=patterns, cache_dir=cache,
                                         endpoint=endpoint, local_files_only=offline, tqdm_class=TerminalBar))
    except Exception as exc:
        where = {"endpoint": endpoint or constants.ENDPOINT, "cache": cache or constants.HF_HUB_CACHE}
        message = _failure(exc, text, revision, offline, **where)
        if message is None:
            raise
        raise CheckpointError(message) from exc


def _failure(exc: Exception, text: str, revision: str | None, offline: bool, endpoint: str, cache: str) -> str | None:
    """The one line for a hub download that failed, or None for an error that is not the hub's."""
    from huggingface_hub import errors
    from huggingface_hub.utils import httpx

    local = "or give a local checkpoint directory"
    if isinstance(exc, errors.GatedRepoError):
        return (f"{text}: a gated model ({_status(exc)}): accept its conditions on its page at {endpoint} and log in "
                f"(hf auth login, or set HF_TOKEN), {local}")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (f"{text}: no such local path, and no model of that name on the Hugging Face hub at {endpoint} "
                f"({_status(exc)}): check the name (a private model needs hf auth login or HF_TOKEN)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{text}: the model has no revision {revision!r} on the hub at {endpoint}: give a branch, tag or commit"
    if isinstance(exc, errors.LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE=1" if offline else _reason(exc.__cause__ or exc)
        return (f"{text}: not in the Hugging Face cache ({cache}) and the hub cannot be reached ({why}); "
                f"download it once with network access {local}")
    if isinstance(exc, errors.HfHubHTTPError) and exc.response is not None:
        return f"{text}: the hub at {endpoint} answered {_status(exc)}: try again later {local}"
    if isinstance(exc, httpx.TransportError) or (isinstance(exc, OSError) and "Consistency check" in str(exc)):
        return (f"{text}: the download from {endpoint} was interrupted ({_reason(exc)}); "
                "run the command again to fetch the rest")
    return None


def _status(exc) -> str:
    response = getattr(exc, "response", None)
    return f"HTTP {response.status_code}" if response is not None else type(exc).__name__


def _reason(exc: BaseException) -> str:
    if getattr(exc, "response", None) is not None:
        return _status(exc)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(exc).__name__
