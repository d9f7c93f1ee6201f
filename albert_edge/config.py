"""ALBERT configuration: one frozen dataclass, Hugging Face field names, named presets."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = [
    "AlbertConfig",
    "ConfigError",
    "PRESETS",
    "PAPER_PARAMS",
    "SHARING",
    "LAYOUTS",
    "ACTIVATIONS",
    "load_config",
]


# Activations by the names Hugging Face configs use. Google's original
# albert_config.json says "gelu" for the tanh approximation, which HF calls "gelu_new".
ACTIVATIONS = ("gelu_new", "gelu", "gelu_fast", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")

# Cross-layer sharing strategies of the ALBERT paper (section 4.5). "all" is ALBERT's default;
# the others keep num_hidden_groups for the part that is shared and give every depth its own
# copy of the part that is not.
SHARING = ("all", "attention", "ffn", "none")

# Whose construction rules a model's weights follow: "hf" as transformers builds ALBERT, "original"
# as Google's modeling.py does. They differ in two places only: with E = H Google's code builds
# no E -> H projection, and it picks the group of depth i as int(i / L * G) where transformers
# computes int(i / (L / G)); in floating point these differ for a few (L, G), e.g. L = G = 22
# (depth 15 -> group 14, so Google's model never builds group 15) or L = 18, G = 14.
LAYOUTS = ("hf", "original")


@dataclass(frozen=True)
class AlbertConfig:
    """Shape and hyper-parameters of an ALBERT model.

    The paper's symbols, as used in comments and reports throughout albert-edge:

    - V = ``vocab_size``: sentencepiece vocabulary.
    - E = ``embedding_size``: width of the token embeddings (factorized: V x E, then E -> H).
    - H = ``hidden_size``: width of the transformer.
    - L = ``num_hidden_layers``: depth, the number of layer applications.
    - G = ``num_hidden_groups``: distinct sets of layer weights; depth ``i`` uses group
      ``int(i / (L / G))`` (``layout`` "original": ``int(i / L * G)``, see LAYOUTS).
      ALBERT uses G = 1 (all layers share one set), BERT is G = L with E = H.
    - ``inner_group_num``: distinct layers inside each group, applied in sequence.

    Field names are those of Hugging Face ``config.json``; ``sharing`` is albert-edge's own
    key for the paper's sharing variants that HF cannot express (saved as an extra key), and
    ``layout`` ("hf" or "original", see LAYOUTS) is too; it is "original" only for a model
    read from Google's code whose weights transformers' rules would arrange differently.
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    classifier_dropout_prob: float = 0.1
    pad_token_id: int = 0
    bos_token_id: int = 2
    eos_token_id: int = 3
    num_labels: int = 2
    label_names: tuple[Any, ...] | None = None  # id2label's names as config.json holds them
    sharing: str = "all"
    layout: str = "hf"
    # A classifier trained with early exits (albert_edge.exits): how, as canonical JSON, so the
    # frozen config stays hashable; config.json keeps it as an object under albert_edge_exits.
    exits: str | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_types(self)
        positive = (
            "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
            "num_attention_heads", "intermediate_size", "inner_group_num", "max_position_embeddings",
            "type_vocab_size", "num_labels",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} ({value!r}) must be a positive integer")
            if value > _MAX_SIZE:  # counts built from it would overflow a float, shapes an int64
                raise ConfigError(f"{name} (a {value.bit_length()}-bit number) is larger than any tensor "
                                  f"dimension can be ({_MAX_SIZE:,} = 2**63 - 1)")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ConfigError(
                f"num_hidden_groups ({self.num_hidden_groups}) is larger than "
                f"num_hidden_layers ({self.num_hidden_layers}): some groups would never be used"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act ({self.hidden_act!r}) is not one of {', '.join(ACTIVATIONS)}")
        if self.sharing not in SHARING:
            raise ConfigError(f"sharing ({self.sharing!r}) is not one of {', '.join(SHARING)}")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout ({self.layout!r}) is not one of {', '.join(LAYOUTS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise ConfigError(f"{name} ({value!r}) must be in [0, 1)")
        if not float(self.layer_norm_eps) > 0:
            raise ConfigError(f"layer_norm_eps ({self.layer_norm_eps!r}) must be positive")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ConfigError(f"{name} ({value}) is outside the vocabulary (vocab_size {self.vocab_size})")
        if self.label_names is not None and len(self.label_names) != self.num_labels:
            raise ConfigError(
                f"label_names has {len(self.label_names)} names but num_labels is {self.num_labels}"
            )

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def group_of_depth(self, depth: int) -> int:
        """Which of the G weight groups the layer application at ``depth`` uses."""
        return _group_of_depth(depth, self.num_hidden_layers, self.num_hidden_groups, self.layout)

    def group_runs(self) -> list[tuple[int, int]]:
        """The layer applications as (weight group, how many applications in a row), in order;
        with partial sharing ("attention", "ffn") every depth is a group of its own."""
        groups = [self.group_of_depth(d) if self.sharing == "all" else d for d in range(self.num_hidden_layers)]
        return [(group, len(list(run))) for group, run in itertools.groupby(groups)]

    @property
    def has_embedding_projection(self) -> bool:
        """Whether the model has the E -> H ``embedding_hidden_mapping_in`` (Google's code
        builds none when E = H; transformers always builds one)."""
        return self.layout == "hf" or self.embedding_size != self.hidden_size

    def layouts_differ(self) -> bool:
        """Whether transformers' and Google's rules build this shape differently."""
        L, G = self.num_hidden_layers, self.num_hidden_groups
        return self.embedding_size == self.hidden_size or any(
            _group_of_depth(i, L, G, "hf") != _group_of_depth(i, L, G, "original") for i in range(L))

    @property
    def exit_training(self) -> dict[str, Any] | None:
        """How the classifier's early exits were trained (None: it has none)."""
        return None if self.exits is None else json.loads(self.exits)

    def replace(self, **changes: Any) -> AlbertConfig:
        return dataclasses.replace(self, **changes)

    # -- Hugging Face config.json --------------------------------------------------------------
    def to_hf_dict(self, architectures: list[str] | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"model_type": "albert"}
        if architectures:
            data["architectures"] = list(architectures)
        for f in dataclasses.fields(self):
            if f.name in _OWN_KEYS:
                continue
            data[f.name] = getattr(self, f.name)
        labels = self.label_names or tuple(f"LABEL_{i}" for i in range(self.num_labels))
        data["id2label"] = {str(i): name for i, name in enumerate(labels)}
        # a JSON key is a string: a name of config.json that is not one is keyed as JSON spells it
        data["label2id"] = {name if isinstance(name, str) else json.dumps(name): i for i, name in enumerate(labels)}
        if self.sharing != "all":
            # Not expressible in transformers; albert-edge reads it back.
            data["albert_edge_sharing"] = self.sharing
        if self.layout != "hf":
            # Not expressible in transformers either; albert-edge reads it back.
            data["albert_edge_layout"] = self.layout
        if self.exits is not None:
            data["albert_edge_exits"] = json.loads(self.exits)  # transformers keeps it, unread
        for key, value in self.extra:
            data.setdefault(key, value)
        return data

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> AlbertConfig:
        if data.get("model_type", "albert") != "albert":
            raise ConfigError(f"model_type is {data.get('model_type')!r}, not 'albert'")
        names = {f.name for f in dataclasses.fields(cls)} - _OWN_KEYS
        kwargs: dict[str, Any] = {k: data[k] for k in names if k in data and data[k] is not None}
        id2label = data.get("id2label")
        if id2label:
            ordered = _id2label(id2label)
            # The names as config.json holds them: a number, null or a list is kept, not made a
            # string, so what writes labels for an app (convert) refuses it naming the label
            # (albert_edge.labels.check_labels); loading for training or PyTorch needs no names.
            labels = tuple(_frozen(v) for _, v in ordered)
            # transformers writes LABEL_0, LABEL_1, ... when no names were given.
            if labels != tuple(f"LABEL_{i}" for i in range(len(labels))):
                kwargs["label_names"] = labels
            kwargs["num_labels"] = len(ordered)
        elif "num_labels" in data:
            kwargs["num_labels"] = data["num_labels"]
        kwargs["sharing"] = data.get("albert_edge_sharing", "all")
        kwargs["layout"] = data.get("albert_edge_layout", "hf")
        if data.get("albert_edge_exits") is not None:
            exits = data["albert_edge_exits"]
            if not isinstance(exits, dict):
                raise ConfigError(f"albert_edge_exits is {type(exits).__name__}, not an object")
            kwargs["exits"] = json.dumps(exits, sort_keys=True)
        eos = kwargs.get("eos_token_id")
        if isinstance(eos, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in eos):
            # transformers allows several end tokens (for generation, which ALBERT never does): the
            # first is kept; none ([]) is taken as not given, like null, so the default stands.
            if eos:
                kwargs["eos_token_id"] = eos[0]
            else:
                del kwargs["eos_token_id"]
        known = names | {"id2label", "label2id", "num_labels", "albert_edge_sharing", "albert_edge_layout",
                         "albert_edge_exits", "model_type"}
        kwargs["extra"] = tuple(
            (k, v) for k, v in sorted(data.items()) if k not in known and k in _HF_PASSTHROUGH
        )
        try:
            return cls(**kwargs)
        except TypeError as exc:  # wrong value types reach here
            raise ConfigError(f"config.json has a value of the wrong type: {exc}") from None

    # -- Google's original albert_config.json --------------------------------------------------
    def to_original_dict(self) -> dict[str, Any]:
        act = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh"}
        if self.hidden_act not in act:
            raise ConfigError(
                f"hidden_act ({self.hidden_act!r}) has no name in the original ALBERT code, "
                "which knows gelu (tanh approximation), relu and tanh"
            )
        if self.sharing != "all":
            raise ConfigError(f"sharing ({self.sharing!r}) cannot be written as an original albert_config.json")
        if self.layout == "hf" and self.layouts_differ():
            raise ConfigError("this model follows transformers' layout, which Google's code would build "
                              "differently (E = H, or another layer -> group assignment); it cannot be "
                              "written as an original albert_config.json")
        return {
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "hidden_act": act[self.hidden_act],
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "embedding_size": self.embedding_size,
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_hidden_groups": self.num_hidden_groups,
            "net_structure_type": 0,
            "gap_size": 0,
            "num_memory_blocks": 0,
            "inner_group_num": self.inner_group_num,
            "down_scale_factor": 1,
            "type_vocab_size": self.type_vocab_size,
            "vocab_size": self.vocab_size,
        }

    @classmethod
    def from_original_dict(cls, data: dict[str, Any]) -> AlbertConfig:
        if data.get("net_structure_type", 0) != 0:
            raise ConfigError(
                f"net_structure_type ({data['net_structure_type']}) is not supported: "
                "only the standard ALBERT structure (0) is"
            )
        act = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}
        hidden_act = data.get("hidden_act", "gelu")
        if hidden_act not in act:
            raise ConfigError(f"hidden_act ({hidden_act!r}) is not one of the original code's: gelu, relu, tanh")
        keys = (
            "attention_probs_dropout_prob", "hidden_dropout_prob", "embedding_size", "hidden_size",
            "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
            "num_hidden_layers", "num_hidden_groups", "inner_group_num", "type_vocab_size", "vocab_size",
        )
        kwargs = {k: data[k] for k in keys if k in data}
        config = cls(hidden_act=act[hidden_act], **kwargs)
        # Recorded only where it matters, so such a config equals (and saves as) the HF one.
        return config.replace(layout="original") if config.layouts_differ() else config

    # -- files ---------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, architectures: list[str] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_hf_dict(architectures), indent=2) + "\n")
        return path

    @classmethod
    def preset(cls, name: str) -> AlbertConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
        return cls(**PRESETS[name])


# The Python types each field takes from JSON (bool is an int to Python, never to a config).
_MAX_SIZE = 2**63 - 1  # the largest tensor dimension (int64) any runtime or file format can hold


def _group_of_depth(depth: int, L: int, G: int, layout: str) -> int:
    if layout == "original":
        return int(depth / L * G)  # Google's modeling.py, as it computes it
    return int(depth / (L / G))  # transformers' modeling_albert.py, as it computes it


_FIELD_TYPES = {"int": (int,), "float": (int, float), "str": (str,)}


def _check_types(config: AlbertConfig) -> None:
    """A value of the wrong kind ("0.1" where a float belongs) is named with the field."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name == "label_names":
            # Any JSON value config.json's id2label holds (see from_hf_dict); whether the names can
            # label an app's classes is albert_edge.labels.check_labels's to say, where they are written.
            if value is not None and not isinstance(value, tuple):
                raise ConfigError(f"label_names ({value!r}) must be a list of names")
            continue
        kinds = _FIELD_TYPES.get(str(f.type))
        if kinds and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise ConfigError(f"{f.name} ({value!r}) must be {'an' if f.type == 'int' else 'a'} "
                              f"{ {'int': 'integer', 'float': 'number', 'str': 'string'}[str(f.type)] }")


def _frozen(value: Any) -> Any:
    """A JSON value as an immutable one (a list becomes a tuple), so the frozen config stays
    hashable; it reads back from JSON as the list it was."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _id2label(id2label: Any) -> list[tuple[int, Any]]:
    """id2label's (id, name) pairs in id order; its keys must be the ids 0..n-1."""
    if not isinstance(id2label, dict):
        raise ConfigError(f"id2label ({id2label!r}) must be an object mapping ids to label names")
    try:
        ordered = sorted((int(k), v) for k, v in id2label.items())
    except (TypeError, ValueError):
        raise ConfigError(f"id2label keys ({', '.join(map(repr, id2label))}) must be integers") from None
    if [i for i, _ in ordered] != list(range(len(ordered))):
        raise ConfigError(f"id2label keys ({', '.join(str(i) for i, _ in ordered)}) must be 0 to {len(ordered) - 1}")
    return ordered


# Keys a config.json of a model always has; a JSON object without them is some other file.
_REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")

# Keys of HF config.json that are not ours but should survive a load/save round trip.
# Fields that config.json spells its own way (id2label, albert_edge_*), or not at all (extra).
_OWN_KEYS = {"label_names", "num_labels", "sharing", "layout", "exits", "extra"}
_HF_PASSTHROUGH = {"architectures", "classifier_dropout", "problem_type", "finetuning_task"}


def load_config(path: str | os.PathLike) -> AlbertConfig:
    """Read a config from a preset name, an HF config.json, an original albert_config.json,
    or a directory holding one of them."""
    text_path = str(path)
    if text_path in PRESETS:
        return AlbertConfig.preset(text_path)
    path = Path(path)
    if path.is_dir():
        for name in ("config.json", "albert_config.json"):
            if (path / name).is_file():
                return load_config(path / name)
        raise ConfigError(f"{path} holds no config.json or albert_config.json")
    if not path.is_file():
        raise ConfigError(f"{text_path} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # ValueError: JSON, or a number of more than 4300 digits
        if "integer string conversion" in str(exc):
            raise ConfigError(f"{path} holds a number of more than {sys.get_int_max_str_digits()} digits: "
                              "not a size any model has") from None
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path} is not a model config: it nests arrays or objects too deep") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing and data.get("model_type", "albert") == "albert":
        what = ("an albert-edge manifest; give the checkpoint or a config.json"
                if {"files", "source", "config"} <= set(data) else "not a model config")
        raise ConfigError(f"{path} is {what} (it has no {', '.join(missing)})")
    # Original configs have no model_type and carry keys only Google's code writes.
    original = "model_type" not in data and ("net_structure_type" in data or path.name == "albert_config.json")
    return AlbertConfig.from_original_dict(data) if original else AlbertConfig.from_hf_dict(data)


def _albert(hidden: int, layers: int, heads: int, inner: int) -> dict[str, Any]:
    return dict(
        vocab_size=30000, embedding_size=128, hidden_size=hidden, num_hidden_layers=layers,
        num_hidden_groups=1, num_attention_heads=heads, intermediate_size=inner,
    )


def _bert(hidden: int, layers: int, heads: int, inner: int) -> dict[str, Any]:
    # BERT in ALBERT's terms: E = H and every depth has its own weights (G = L).
    return dict(_albert(hidden, layers, heads, inner), embedding_size=hidden, num_hidden_groups=layers,
                hidden_act="gelu")


# Named sizes are data. Parameter counts are the unique parameters of the base model
# (AlbertModel with pooler), computed by albert_edge.params.
PRESETS: dict[str, dict[str, Any]] = {
    "albert-base-v2": _albert(768, 12, 12, 3072),  # 11.7M params
    "albert-large-v2": _albert(1024, 24, 16, 4096),  # 17.7M params
    "albert-xlarge-v2": _albert(2048, 24, 16, 8192),  # 58.7M params
    "albert-xxlarge-v2": _albert(4096, 12, 64, 16384),  # 222.6M params
    "bert-base": _bert(768, 12, 12, 3072),  # 109.7M params (ALBERT layout keeps an H x H projection)
    "bert-large": _bert(1024, 24, 16, 4096),  # 335.7M params
    "bert-xlarge": _bert(2048, 24, 16, 8192),  # 1279.5M params
    # Tests: V=99, E=8, H=16, L=4, G=2 actually exercises sharing (G < L) in seconds.
    "tiny": dict(
        vocab_size=99, embedding_size=8, hidden_size=16, num_hidden_layers=4, num_hidden_groups=2,
        num_attention_heads=4, intermediate_size=32, inner_group_num=1, max_position_embeddings=64,
    ),
}

# Parameter counts published in the ALBERT paper (Lan et al., 2020, Table 1), in millions.
PAPER_PARAMS: dict[str, float] = {
    "albert-base-v2": 12, "albert-large-v2": 18, "albert-xlarge-v2": 60, "albert-xxlarge-v2": 235,
    "bert-base": 108, "bert-large": 334, "bert-xlarge": 1270,
}
