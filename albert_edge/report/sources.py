"""What the report is made from: each SOURCE argument recognised (preset, config, checkpoint,
conversion directory, model file, profile results, quantize result) and checked to be about the
same model. Nothing is measured or counted here; figures come from the modules that own them.
Device side: no torch, no tensorflow."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import PRESETS, AlbertConfig, load_config
from ..formats.kinds import find
from ..errors import AlbertEdgeError, ConfigError
from ..hub import is_hub_id, repo_name, resolve
from ..profile.record import SCHEMA as PROFILE_SCHEMA, records_problem

__all__ = ["ReportError", "Inputs", "ModelFileInput", "gather", "WEIGHTS_NOTE", "weights_note"]

log = logging.getLogger(__name__)

# A note beside a checkpoint saying how its weights were made, e.g. {"weights": "random-init"}.
# Agreement figures of files converted from random weights are not shown as accuracy.
WEIGHTS_NOTE = "albert-edge-weights.json"


class ReportError(AlbertEdgeError):
    """Report inputs that are missing, unreadable or about different models."""


@dataclass
class ModelFileInput:
    path: Path
    sha256: str
    entry: Any = None  # converters.manifest.FileEntry when a manifest lists the file
    manifest_dir: Path | None = None
    random_weights: bool = False
    quantize_result: dict | None = None  # `quantize --json` output naming this file


@dataclass
class Inputs:
    sources: list[dict[str, str]] = field(default_factory=list)
    name: str | None = None  # preset name or the source's file name
    config: AlbertConfig | None = None
    config_from: str | None = None
    manifest: Any = None  # the first conversion directory's Manifest
    adaptive_manifest: Any = None  # the first adaptive conversion's (convert --adaptive) Manifest
    files: list[ModelFileInput] = field(default_factory=list)
    profile: list[dict] = field(default_factory=list)  # ProfileRecord dicts, as read
    profile_from: list[str] = field(default_factory=list)
    quantize_results: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def gather(sources: list[str | Path], name: str | None = None) -> Inputs:
    """Recognise every source, read it and check that all are about one model. Raises
    ReportError (one line) for a source that is missing, unreadable or about another model.
    ``name`` names the model (default: the preset, or the file or directory name); a preset's
    name also brings the paper's published figure."""
    if not sources:
        raise ReportError("no SOURCE given: name a preset, a config, a checkpoint, a conversion directory, "
                          "model files or profile results")
    inputs = Inputs()
    for source in sources:
        _read_source(str(source), inputs)
    _match_quantize_results(inputs)
    _match_profile(inputs)
    if name:
        inputs.name = name
    return inputs


def _read_source(source: str, inputs: Inputs) -> None:
    from ..formats import manifest as manifest_io

    if source in PRESETS and not Path(source).exists():
        _set_config(inputs, AlbertConfig.preset(source), source, source)
        inputs.sources.append({"kind": "preset", "source": source})
        return
    if is_hub_id(source):
        _read_config(resolve(source, config_only=True), inputs, "checkpoint", name=repo_name(source))
        return
    path = Path(source)
    if not path.exists():
        raise ReportError(f"{source}: no such file or directory, and not a preset ({', '.join(PRESETS)})")
    if path.is_dir() and (path / manifest_io.MANIFEST_NAME).is_file():
        _read_manifest(path, inputs)
    elif path.is_dir():
        _read_config(path, inputs, "checkpoint")
    elif find(path) is not None:
        _read_model_file(path, inputs)
    elif path.suffix.lower() == ".jsonl":
        from ..profile.output import load_records

        _read_profile(path, load_records(path), inputs)
    elif path.suffix.lower() == ".json":
        _read_json(path, inputs)
    else:
        raise ReportError(f"{path}: not a source the report reads (a preset, config, checkpoint directory, "
                          "conversion directory, .onnx/.ort/.tflite/.pte file, or .json/.jsonl results)")


def _read_json(path: Path, inputs: Inputs) -> None:
    data = _load_json(path)
    if isinstance(data, list) or (isinstance(data, dict) and data.get("schema") == PROFILE_SCHEMA):
        _read_profile(path, data if isinstance(data, list) else [data], inputs)
    elif isinstance(data, dict) and "files" in data and "config" in data and "source" in data:
        _read_manifest(path.parent if path.name == "manifest.json" else path, inputs)
    elif isinstance(data, dict) and "scheme" in data and "accuracy" in data and "out_path" in data:
        inputs.quantize_results.append(data)
        inputs.sources.append({"kind": "quantize-result", "source": str(path)})
    elif isinstance(data, dict) and ("hidden_size" in data or "model_type" in data):
        _read_config(path, inputs, "config")
    else:
        raise ReportError(f"{path}: a JSON file the report does not know (not profile results, a manifest, "
                          "a quantize result or a config)")


def _read_config(path: Path, inputs: Inputs, kind: str, name: str | None = None) -> None:
    try:
        config = load_config(path)
    except ConfigError as exc:
        raise ReportError(f"{path}: {exc}") from None
    _set_config(inputs, config, name or path.name, str(path))
    inputs.sources.append({"kind": kind, "source": str(path)})


def _read_manifest(path: Path, inputs: Inputs) -> None:
    from ..formats import manifest as manifest_io

    directory = path if path.is_dir() else path.parent
    try:
        manifest = manifest_io.read(path)
    except AlbertEdgeError as exc:
        raise ReportError(str(exc)) from None
    try:
        config = AlbertConfig.from_hf_dict(manifest.config)
    except (ConfigError, TypeError, KeyError) as exc:
        raise ReportError(f"{directory}/manifest.json: its config cannot be read: {exc}") from None
    checkpoint = manifest.source.get("checkpoint")
    _set_config(inputs, config, Path(checkpoint).name if checkpoint else directory.name, str(directory))
    random = weights_note(checkpoint).get("weights") == "random-init" if checkpoint else False
    # every file it lists, the app files and the transformers-js/ folder too: FileChanged naming the file
    manifest_io.check_listed(directory, "convert again, or give the files that are there")
    for entry in manifest.files:
        file_path = directory / entry.name
        _add_file(inputs, ModelFileInput(file_path, manifest_io.file_sha256(file_path), entry, directory, random))
    if inputs.manifest is None:
        inputs.manifest = manifest
    if inputs.adaptive_manifest is None and manifest.source.get("adaptive"):
        inputs.adaptive_manifest = manifest
    inputs.sources.append({"kind": "conversion", "source": str(directory)})


def _read_model_file(path: Path, inputs: Inputs) -> None:
    from ..formats import manifest as manifest_io

    directory = path.parent
    try:
        entry = manifest_io.check_beside(path)  # one that lists the file: the file must be the one it lists
    except AlbertEdgeError as exc:
        raise ReportError(str(exc)) from None
    sha = manifest_io.file_sha256(path)
    if entry is not None:
        manifest = manifest_io.read(directory)
        checkpoint = manifest.source.get("checkpoint")
        _set_config(inputs, AlbertConfig.from_hf_dict(manifest.config),
                    Path(checkpoint).name if checkpoint else directory.name, str(directory))
        random = weights_note(checkpoint).get("weights") == "random-init" if checkpoint else False
        _add_file(inputs, ModelFileInput(path, sha, entry, directory, random))
        inputs.sources.append({"kind": "model-file", "source": str(path)})
        return
    _add_file(inputs, ModelFileInput(path, sha))
    inputs.sources.append({"kind": "model-file", "source": str(path)})


def _read_profile(path: Path, records: list, inputs: Inputs) -> None:
    """Profile records, each checked against the record's schema (ProfileRecord) when read."""
    if not records:
        raise ReportError(f"{path} holds no profile records (an empty list): give the output of "
                          "`albert-edge profile --json`")
    problem = records_problem(records)
    if problem:
        raise ReportError(f"{path}: {problem}: not a profile record as `albert-edge profile --json` writes it")
    log.info("%s: %d profile records", path, len(records))
    inputs.profile.extend(records)
    inputs.profile_from.append(str(path))
    inputs.sources.append({"kind": "profile", "source": str(path)})


def _set_config(inputs: Inputs, config: AlbertConfig, name: str, source: str) -> None:
    if inputs.config is None:
        inputs.config, inputs.name, inputs.config_from = config, name, source
        return
    if config != inputs.config:
        differ = [f"{k} {getattr(inputs.config, k)} vs {getattr(config, k)}" for k in
                  ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
                   "num_attention_heads", "intermediate_size", "inner_group_num")
                  if getattr(inputs.config, k) != getattr(config, k)]
        detail = ", ".join(differ) or "their configs differ"
        raise ReportError(f"{source} describes another model than {inputs.config_from} ({detail}); "
                          "report on one model at a time")


def _add_file(inputs: Inputs, item: ModelFileInput) -> None:
    if any(f.path.resolve() == item.path.resolve() for f in inputs.files):
        return
    inputs.files.append(item)


def _match_quantize_results(inputs: Inputs) -> None:
    for result in inputs.quantize_results:
        out = Path(result["out_path"]).resolve()
        for f in inputs.files:
            if f.path.resolve() == out:
                f.quantize_result = result
                break
        else:
            raise ReportError(f"the quantize result for {result['out_path']} names no file given: "
                              "give that file (or its conversion directory) too")


def _match_profile(inputs: Inputs) -> None:
    """Every profile record must be of a file given, by sha256; with no file given the records
    cannot be checked, and the report says so."""
    if not inputs.profile:
        return
    if inputs.config is not None:
        for record in inputs.profile:
            vocab = (record.get("model") or {}).get("vocab_size")
            if vocab is not None and vocab != inputs.config.vocab_size:
                raise ReportError(f"profile result for {record['file_name']}: a model with {vocab} vocabulary "
                                  f"entries, not the {inputs.config.vocab_size} of {inputs.config_from}: "
                                  "a profile of another model")
    if not inputs.files:
        inputs.notes.append("profile results not checked against model files (none given): "
                            "their file names and sha256 are shown as recorded")
        return
    known = {f.sha256: f for f in inputs.files}
    names = {f.path.name for f in inputs.files}
    for record in inputs.profile:
        if record["estimated"] and not record["sha256"] and record["file_name"] in names:
            continue  # an estimate for a setting the host did not measure carries no sha256
        if record["sha256"] not in known:
            same_name = [f for f in inputs.files if f.path.name == record["file_name"]]
            why = ("its sha256 differs from the file of that name given: a profile of another model "
                   "or of an older file") if same_name else "no file given has its sha256: a profile of another model"
            raise ReportError(f"profile result for {record['file_name']} (sha256 {record['sha256'][:12]}...): "
                              f"{why}")


def weights_note(checkpoint: str | Path) -> dict:
    """The note beside a checkpoint saying how its weights were made ({} when there is none)."""
    path = Path(checkpoint)
    note = (path if path.is_dir() else path.parent) / WEIGHTS_NOTE
    try:
        data = json.loads(note.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not readable JSON: {exc}") from None
