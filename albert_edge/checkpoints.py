"""Load ALBERT checkpoints (Hugging Face directories, Google's original TF checkpoints) and save
Hugging Face directories. Nothing here unpickles untrusted data."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import AlbertConfig, load_config
from .errors import CheckpointError, ConfigError, install_line, optional_import
from .files import atomic_write
from .model import ALL_HEADS, AlbertModel, build_model

__all__ = ["Checkpoint", "load", "load_model", "model_from_checkpoint", "validate", "check_float_weights", "save", "detect_format", "expected_shapes", "tf_key_table", "describe"]

log = logging.getLogger(__name__)

# Head weights by prefix in the checkpoint namespace (our names with the "albert." body prefix removed).
_HEAD_PREFIXES = {"predictions.": "mlm", "sop_classifier.": "pretraining", "classifier.": "classifier",
                  "qa_outputs.": "qa"}
# Aliases HF writes for tied weights; we read the owner and ignore these.
_TIED_ALIASES = {"predictions.decoder.weight", "predictions.decoder.bias"}
# Buffers older transformers versions saved with the weights.
_IGNORED = {"embeddings.position_ids", "embeddings.token_type_ids"}
# Optimizer slots and counters in original TF checkpoints.
_TF_SKIP_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v", "/Adam", "/Adam_1", "/Momentum")
_TF_SKIP_NAMES = {"global_step", "good_steps", "loss_scale"}


@dataclass
class Checkpoint:
    """A checkpoint's config and weights, read without building a model.

    ``state`` is in the checkpoint namespace: our (= Hugging Face) parameter names without the
    ``albert.`` prefix that HF's head classes put on the encoder's weights.
    """

    config: AlbertConfig
    state: dict[str, torch.Tensor]
    heads: tuple[str, ...]
    format: str
    path: Path
    files: list[Path] = field(default_factory=list)

    @property
    def head(self) -> str:
        """The head this checkpoint was saved with: the richest one it has weights for."""
        for name in ("pretraining", "mlm", "classification", "token-classification", "qa", "multiple-choice"):
            if name in self.heads:
                return name
        return "base"


# -- the key table -----------------------------------------------------------------------------

def _model_state_names(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Unique parameter names of ``model`` in the checkpoint namespace, with shapes."""
    return {name.removeprefix("albert."): tuple(p.shape) for name, p in model.named_parameters()}


def expected_shapes(config: AlbertConfig, head: str, pooler: bool = True) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint must hold for ``head``, with its shape, in the checkpoint namespace.

    Built from the model itself on the meta device, so the table cannot drift from model.py.
    """
    with torch.device("meta"):
        return _model_state_names(build_model(config, head, add_pooling_layer=pooler))


def tf_key_table(config: AlbertConfig) -> dict[str, tuple[str, bool]]:
    """Our name -> (original TF variable name, transpose?) for every weight of every head.

    TF dense kernels are stored (in, out); PyTorch Linear weights are (out, in).
    """
    table: dict[str, tuple[str, bool]] = {
        "embeddings.word_embeddings.weight": ("bert/embeddings/word_embeddings", False),
        "embeddings.position_embeddings.weight": ("bert/embeddings/position_embeddings", False),
        "embeddings.token_type_embeddings.weight": ("bert/embeddings/token_type_embeddings", False),
        "embeddings.LayerNorm.weight": ("bert/embeddings/LayerNorm/gamma", False),
        "embeddings.LayerNorm.bias": ("bert/embeddings/LayerNorm/beta", False),
        "pooler.weight": ("bert/pooler/dense/kernel", True),
        "pooler.bias": ("bert/pooler/dense/bias", False),
        "predictions.dense.weight": ("cls/predictions/transform/dense/kernel", True),
        "predictions.dense.bias": ("cls/predictions/transform/dense/bias", False),
        "predictions.LayerNorm.weight": ("cls/predictions/transform/LayerNorm/gamma", False),
        "predictions.LayerNorm.bias": ("cls/predictions/transform/LayerNorm/beta", False),
        "predictions.bias": ("cls/predictions/output_bias", False),
        "sop_classifier.classifier.weight": ("cls/seq_relationship/output_weights", False),
        "sop_classifier.classifier.bias": ("cls/seq_relationship/output_bias", False),
        # run_classifier.py of the original code keeps its head at the top level.
        "classifier.weight": ("output_weights", False),
        "classifier.bias": ("output_bias", False),
    }
    layer = {
        "attention.query": "attention_1/self/query",
        "attention.key": "attention_1/self/key",
        "attention.value": "attention_1/self/value",
        "attention.dense": "attention_1/output/dense",
        "ffn": "ffn_1/intermediate/dense",
        "ffn_output": "ffn_1/intermediate/output/dense",
    }
    norms = {"attention.LayerNorm": "LayerNorm", "full_layer_layer_norm": "LayerNorm_1"}
    if config.has_embedding_projection:  # Google's code builds none when E = H
        table["encoder.embedding_hidden_mapping_in.weight"] = ("bert/encoder/embedding_hidden_mapping_in/kernel", True)
        table["encoder.embedding_hidden_mapping_in.bias"] = ("bert/encoder/embedding_hidden_mapping_in/bias", False)
    for g in range(config.num_hidden_groups):
        for i in range(config.inner_group_num):
            ours = f"encoder.albert_layer_groups.{g}.albert_layers.{i}."
            theirs = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            for name, tf_name in layer.items():
                table[ours + name + ".weight"] = (theirs + tf_name + "/kernel", True)
                table[ours + name + ".bias"] = (theirs + tf_name + "/bias", False)
            for name, tf_name in norms.items():
                table[ours + name + ".weight"] = (theirs + tf_name + "/gamma", False)
                table[ours + name + ".bias"] = (theirs + tf_name + "/beta", False)
    return table


# -- reading ------------------------------------------------------------------------------------

def detect_format(path: str | os.PathLike) -> str:
    """'hf' for a Hugging Face directory, 'tf' for an original TF checkpoint (directory or prefix)."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():
            return "hf"
        if list(path.glob("*.index")) or (path / "checkpoint").is_file():
            return "tf"
        raise CheckpointError(
            f"{path} has no config.json (Hugging Face) and no model.ckpt-*.index (original TF checkpoint)"
        )
    if Path(str(path) + ".index").is_file():
        return "tf"
    if not path.exists():
        raise CheckpointError(f"{path} does not exist")
    raise CheckpointError(f"{path} is not a checkpoint directory or a TF checkpoint prefix")


def load(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint's config and weights."""
    fmt = detect_format(path)
    return _load_hf(Path(path)) if fmt == "hf" else _load_tf(Path(path))


def _read_hf_weights(directory: Path) -> tuple[dict[str, torch.Tensor], list[Path]]:
    st = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    binf = directory / "pytorch_model.bin"
    if st.is_file():
        return _read_safetensors(st), [st]
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(_read_safetensors(directory / shard))
        return state, [directory / s for s in shards]
    if binf.is_file():
        try:
            obj = torch.load(binf, map_location="cpu", weights_only=True)
        except Exception as exc:  # weights_only refuses anything but tensors and plain containers
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            # torch's first line is advice to load it unsafely; the reason is the unpickler's line.
            reason = next((line for line in lines if "WeightsUnpickler error" in line), lines[0])
            raise CheckpointError(
                f"{binf} is not a plain state dict of tensors (refusing to unpickle arbitrary objects): {reason}"
            ) from None
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise CheckpointError(f"{binf} is not a plain state dict (a dict of name -> tensor)")
        return obj, [binf]
    raise CheckpointError(f"{directory} has config.json but no model.safetensors or pytorch_model.bin")


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} is truncated or corrupt: {reason}") from None


def _normalize_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        key = key.removeprefix("module.").removeprefix("albert.")
        if key not in _IGNORED:
            out[key] = value.float() if value.is_floating_point() else value
    return out


def _heads_of(state: dict, architectures: list[str]) -> tuple[str, ...]:
    heads = ["base"]
    if "predictions.dense.weight" in state:
        heads.append("mlm")
        if "sop_classifier.classifier.weight" in state:
            heads.append("pretraining")
    if "classifier.weight" in state:
        # Three heads store classifier.*; the saving class or the pooler tells them apart.
        if any("MultipleChoice" in a for a in architectures):
            heads.append("multiple-choice")
        elif any("TokenClassification" in a for a in architectures):
            heads.append("token-classification")
        elif any("SequenceClassification" in a for a in architectures) or "pooler.weight" in state:
            heads.append("classification")
            if state["classifier.weight"].shape[0] == 1:  # one score from the pooled [CLS]: also what
                heads.append("multiple-choice")           # a multiple-choice head computes per choice
        else:
            heads.append("token-classification")
    if "qa_outputs.weight" in state:
        heads.append("qa")
    return tuple(heads)


def _load_hf(directory: Path) -> Checkpoint:
    try:
        config = load_config(directory / "config.json")
    except ConfigError as exc:
        raise CheckpointError(f"{directory / 'config.json'}: {exc}") from None
    raw = json.loads((directory / "config.json").read_text())
    state, files = _read_hf_weights(directory)
    state = _normalize_keys(state)
    heads = _heads_of(state, raw.get("architectures") or [])
    return Checkpoint(config, state, heads, "hf", directory, files)


def _tf_prefix(path: Path) -> Path:
    if path.is_dir():
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(str(path))
        if latest:
            return Path(latest)
        indexes = sorted(path.glob("*.index"), key=lambda p: p.stat().st_mtime)
        if not indexes:
            raise CheckpointError(f"{path} holds no TF checkpoint (no *.index file)")
        return indexes[-1].with_suffix("")
    return path


def _import_tf():
    try:
        tf = optional_import("tensorflow")
    except ImportError:
        raise CheckpointError(
            f"reading an original TF checkpoint needs tensorflow: {install_line('convert')}"
        ) from None
    return tf


def _load_tf(path: Path) -> Checkpoint:
    tf = _import_tf()
    directory = path if path.is_dir() else path.parent
    config_path = next((directory / n for n in ("albert_config.json", "config.json") if (directory / n).is_file()), None)
    if config_path is None:
        raise CheckpointError(f"{directory} has a TF checkpoint but no albert_config.json beside it")
    config = load_config(config_path)
    prefix = _tf_prefix(path)
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        names = reader.get_variable_to_shape_map()
    except Exception as exc:
        raise CheckpointError(f"cannot read TF checkpoint {prefix}: {str(exc).splitlines()[0][:200]}") from None
    variables = {}
    for name in names:
        short = name.removeprefix("module/")
        if short in _TF_SKIP_NAMES or short.endswith(_TF_SKIP_SUFFIXES):
            continue
        variables[short] = name
    if "output_weights" in variables:  # a run_classifier.py fine-tune: its label count is the config's
        config = config.replace(num_labels=int(names[variables["output_weights"]][0]))
    table = tf_key_table(config)
    by_tf = {tf_name: (ours, transpose) for ours, (tf_name, transpose) in table.items()}
    unknown = sorted(set(variables) - set(by_tf))
    if unknown:
        raise CheckpointError(
            f"TF checkpoint {prefix} has variable {unknown[0]!r} that no ALBERT weight of this config maps to "
            f"({len(unknown)} such); does albert_config.json match the checkpoint?"
        )
    state = {}
    for tf_name, full in variables.items():
        ours, transpose = by_tf[tf_name]
        value = torch.from_numpy(reader.get_tensor(full).copy()).float()
        state[ours] = value.T.contiguous() if transpose else value
    files = sorted(prefix.parent.glob(prefix.name + ".*"))
    return Checkpoint(config, state, _heads_of(state, ["AlbertForSequenceClassification"]), "tf", prefix, files)


# -- building a model ---------------------------------------------------------------------------

def load_model(path: str | os.PathLike, head: str | None = None) -> tuple[AlbertConfig, nn.Module]:
    """Build the model for ``head`` (default: the checkpoint's own) and fill it with the checkpoint's
    weights, checking every tensor's presence and shape. Returns (config, model in eval mode)."""
    ckpt = load(path)
    return ckpt.config, model_from_checkpoint(ckpt, head)


def validate(ckpt: Checkpoint, head: str | None = None) -> str:
    """Check that ``ckpt`` holds every tensor ``head`` needs, in the config's shapes, and nothing
    that its config cannot explain. Returns the head; raises CheckpointError naming the key."""
    head = head or ckpt.head
    if head not in ALL_HEADS:
        raise CheckpointError(f"unknown head {head!r}; choose one of {', '.join(ALL_HEADS)}")
    if head not in ckpt.heads:
        raise CheckpointError(
            f"{ckpt.path} has no weights for head {head!r}; it has: {', '.join(ckpt.heads)}"
        )
    _check_keys(ckpt, expected_shapes(ckpt.config, head, pooler="pooler.weight" in ckpt.state))
    return head


def check_float_weights(ckpt: Checkpoint) -> None:
    """Weights are floating point: integer tensors would be cast silently into a model that
    computes nonsense (the key table skips buffers such as position_ids before this)."""
    for key, tensor in ckpt.state.items():
        if not tensor.dtype.is_floating_point:
            raise CheckpointError(f"{ckpt.path}: weight {key!r} is {str(tensor.dtype).removeprefix('torch.')}, "
                                  "not floating point: this is not a trained model's checkpoint")


def model_from_checkpoint(ckpt: Checkpoint, head: str | None = None) -> nn.Module:
    head = validate(ckpt, head)
    model = build_model(ckpt.config, head, add_pooling_layer="pooler.weight" in ckpt.state)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(ckpt.state[name.removeprefix("albert.")])
    return model.eval()


def _check_keys(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]]) -> None:
    for name, shape in expected.items():
        if name not in ckpt.state:
            tf_name = tf_key_table(ckpt.config).get(name, (None,))[0] if ckpt.format == "tf" else None
            also = f" (original name {tf_name})" if tf_name else ""
            raise CheckpointError(f"{ckpt.path}: missing tensor {name!r}{also} for this config")
        got = tuple(ckpt.state[name].shape)
        if got != shape:
            raise CheckpointError(
                f"{ckpt.path}: tensor {name!r} has shape {list(got)}, but the config needs {list(shape)}"
            )
    known = set(expected)
    for head in ALL_HEADS:  # weights of other heads are fine to skip, anything else means a mismatch
        known |= set(expected_shapes(ckpt.config, head, pooler=True))
    unexpected = sorted(set(ckpt.state) - known - _TIED_ALIASES)
    if unexpected:
        raise CheckpointError(
            f"{ckpt.path}: unexpected tensor {unexpected[0]!r} ({len(unexpected)} such); "
            "the checkpoint does not match its config"
        )


# -- saving -------------------------------------------------------------------------------------

def save(model: nn.Module, out_dir: str | os.PathLike, spiece: str | os.PathLike | None = None) -> Path:
    """Write ``model`` as a Hugging Face directory: config.json + model.safetensors, and the
    tokenizer's spiece.model when ``spiece`` is given (so transformers and the converters find it).

    Each shared or tied weight is written once, under its first name, as transformers expects
    (it re-ties predictions.decoder to the word embeddings on load). Files are written to a
    temporary name and renamed, so an interrupted save never leaves a half-written checkpoint.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {name: p.detach().cpu().contiguous() for name, p in model.named_parameters()}
    config: AlbertConfig = model.config
    architecture = getattr(model, "hf_architecture", "AlbertModel")
    if isinstance(model, AlbertModel) and model.pooler is None:
        log.info("saving a base model without pooler")
    atomic_write(out / "model.safetensors", lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    atomic_write(out / "config.json", lambda tmp: config.save(tmp, architectures=[architecture]))
    if spiece is not None and Path(spiece).resolve() != (out / "spiece.model").resolve():
        data = Path(spiece).read_bytes()
        atomic_write(out / "spiece.model", data)
    return out


def describe(path: Path) -> dict[str, Any]:
    """What `albert-edge info` says of a checkpoint: format, heads, parameters, files, config."""
    from .formats.describe import shape_of

    ckpt = load(path)
    validate(ckpt)
    c = ckpt.config
    return {
        "kind": "checkpoint",
        "path": str(path),
        "format": {"hf": "Hugging Face directory", "tf": "original TF checkpoint"}.get(ckpt.format, ckpt.format),
        "heads": list(ckpt.heads),
        "head": ckpt.head,
        "parameters": int(sum(t.numel() for t in ckpt.state.values())),
        "tensors": len(ckpt.state),
        "file_bytes": sum(f.stat().st_size for f in ckpt.files),
        "files": [f.name for f in ckpt.files],
        "config": c.to_hf_dict(),
        "shape": shape_of(c.to_hf_dict()),
    }
