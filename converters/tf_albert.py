"""ALBERT's forward pass re-stated in TensorFlow, fed with the weights of our PyTorch model.

Written for the TFLite converter: every distinct PyTorch parameter becomes one TF variable,
created once and read by the serving function however many layers use it, and every
linear weight stays in PyTorch's [out, in] layout, which is what TFLite's FULLY_CONNECTED
stores, so the converter never needs a transposed copy of a weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from torch import nn

from albert_edge.config import AlbertConfig
from albert_edge.errors import ConversionError
from albert_edge.exits import SETTING
from albert_edge.model import (
    MASK_VALUE,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
    AlbertLayer,
    AlbertModel,
)

from albert_edge.formats.graph import INPUT_NAMES, LAYER_FORMS
from albert_edge.formats.tflite_reader import SETTING_SIGNATURE, SIGNATURE

from .task_heads import AdaptiveClassifier, AdaptiveProbabilities, ClassProbabilities, SentenceEmbedding
from .tf_adaptive import adaptive_classification, adaptive_probabilities

__all__ = ["TFAlbert", "input_signature"]

_ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "gelu_new": lambda x: tf.nn.gelu(x, approximate=True),
    "gelu_fast": lambda x: tf.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: tf.nn.gelu(x, approximate=True),
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "relu": tf.nn.relu,
    "silu": tf.nn.silu,
    "swish": tf.nn.silu,
    "tanh": tf.tanh,
}


def input_signature(static_len: int | None = None) -> list[tf.TensorSpec]:
    """(batch, sequence) int32 inputs: both axes dynamic so the interpreter can resize them, or
    (1, static_len) for a static-shape file, the only kind GPU and NPU delegates take."""
    shape = [None, None] if static_len is None else [1, static_len]
    return [tf.TensorSpec(shape, tf.int32, name=name) for name in INPUT_NAMES]


class _Weights:
    """One tf.Variable per distinct PyTorch parameter: a weight shared by several layers (or
    tied, like the MLM decoder) is one variable, read by every layer that uses it, and is frozen
    into one constant buffer by the converter. Parameters are the same when they are the same
    object or view the same memory the same way (a tie made through ``.data``)."""

    def __init__(self) -> None:
        self._by_id: dict[tuple, tf.Variable] = {}

    def __call__(self, param: nn.Parameter, row: bool = False) -> tf.Variable:
        """The variable for ``param``; ``row`` stores a vector as a (1, n) row."""
        key = (param.data_ptr(), tuple(param.shape), tuple(param.stride()), str(param.dtype))
        if key not in self._by_id:
            data = param.detach().cpu().numpy().astype(np.float32, copy=False)
            with tf.init_scope():  # created eagerly, outside the graph being traced
                self._by_id[key] = tf.Variable(data.reshape(1, -1) if row else data, trainable=False)
        var = self._by_id[key]
        if row != (len(var.shape) == 2 and param.dim() == 1):
            raise ValueError("a parameter was asked for both as a vector and as a row")
        return var

    def all(self) -> list[tf.Variable]:
        return list(self._by_id.values())


class TFAlbert(tf.Module):
    """Any of our ALBERT models (any head) as a TF module with one ``serve`` function that
    returns a dict keyed by the model's ``output_names``."""

    def __init__(self, model: nn.Module, layers: str = "unrolled", static_len: int | None = None):
        super().__init__(name="albert")
        if layers not in LAYER_FORMS:
            raise ValueError(f"layers must be one of {LAYER_FORMS}, not {layers!r}")
        self.layers = layers
        self.config: AlbertConfig = model.config
        self.output_names: tuple[str, ...] = tuple(model.output_names)
        self._w = _Weights()
        self._model = model
        self._act = _ACTIVATIONS[self.config.hidden_act]
        self._head = _head_fn(model)
        # A static file ([1, N]) is written in ops LiteRT's GPU accelerator takes whole: sizes are
        # Python ints (no SHAPE-derived tensor), gathers have 1-D indices, no shrink-axis slices.
        self.static_len = static_len
        # Not named `serve`: the converter takes a module with a `serve` attribute for a Keras export
        # and keeps only its serving signature (an adaptive file has two).
        self.serving = tf.function(self._serve, input_signature=input_signature(static_len), autograph=False)
        if isinstance(model, AdaptiveClassifier):  # its exit rule's setting, changeable at run time
            self.exit_setting = tf.Variable(np.float32(model.rule.setting), trainable=False, name=SETTING)
            self.set_exit_setting = tf.function(self._set_exit_setting, autograph=False, input_signature=[
                tf.TensorSpec([], tf.float32, name=SETTING)])

    # -- building blocks -----------------------------------------------------------------------
    def _linear(self, x: tf.Tensor, lin: nn.Linear, row_bias: bool = False) -> tf.Tensor:
        # (..., in) x [out, in]^T: FULLY_CONNECTED reads the weight as stored, no transpose.
        y = tf.matmul(x, self._w(lin.weight), transpose_b=True)
        return y + self._w(lin.bias, row=row_bias) if lin.bias is not None else y

    def _sizes(self, x: tf.Tensor) -> tuple:
        """(B, T) of a (B, T, ...) tensor: Python ints in a static file, tensors otherwise."""
        if self.static_len is not None:
            return 1, self.static_len
        shape = tf.shape(x)
        return shape[0], shape[1]

    def _shape(self, x: tf.Tensor, *tail: int):
        """(B, T, *tail) for a (B, T, ...) tensor ``x``, as RESHAPE and SLICE take a shape. In a
        dynamic file it is made of SHAPE, a STRIDED_SLICE and a CONCATENATION of constants, ops
        that TFLite evaluates while it prepares the graph; a PACK of the sizes is evaluated only
        when the graph runs, which leaves every later tensor without a shape until then: LiteRT's
        CompiledModel then sizes the outputs of a run from the run before it and writes past
        them when the new inputs are longer."""
        if self.static_len is not None:
            return [1, self.static_len, *tail]
        return tf.concat([tf.shape(x)[:2], tf.constant(tail, tf.int32)], axis=0)

    def _lookup(self, table: nn.Embedding, ids: tf.Tensor) -> tf.Tensor:
        """Rows of ``table`` for (B, T) ids; in a static file through (T,) ids: GPU delegates
        gather with 1-D indices only."""
        if self.static_len is None:
            return tf.gather(self._w(table.weight), ids)
        T = self.static_len
        return tf.reshape(tf.gather(self._w(table.weight), tf.reshape(ids, [T])), [1, T, table.embedding_dim])

    def _first_token(self, hidden: tf.Tensor) -> tf.Tensor:
        """hidden[:, 0], (B, H); in a static file a slice and a reshape, not a STRIDED_SLICE with
        shrink_axis_mask (which GPU delegates leave on the CPU)."""
        if self.static_len is None:
            return hidden[:, 0]
        H = hidden.shape[-1]
        return tf.reshape(tf.slice(hidden, [0, 0, 0], [1, 1, H]), [1, H])

    def _add_positions(self, x: tf.Tensor, table: nn.Embedding, ids: tf.Tensor) -> tf.Tensor:
        """``x`` (B, T, E) plus the embeddings of positions 0..T-1 (``ids``: the (B, T) input)."""
        if self.static_len is None:
            # Rows gathered by the positions 0..T-1 of each input: a SLICE of T rows would take
            # its size from the graph, which TFLite evaluates only when it runs (see _shape).
            positions = tf.math.cumsum(tf.ones_like(ids), axis=1, exclusive=True)  # (B, T)
            return x + tf.gather(self._w(table.weight), positions)
        # LiteRT's GPU accelerator (ai-edge-litert 2.3, WebGPU) adds a constant of the tensor's
        # own shape wrongly in 2-D and 3-D (one row of one operand for every position); in the
        # (1, T, 1, E) layout it adds element by element.
        E, T = table.embedding_dim, self.static_len
        positions = tf.reshape(tf.slice(self._w(table.weight), [0, 0], [T, E]), [1, T, 1, E])
        return tf.reshape(tf.reshape(x, [1, T, 1, E]) + positions, [1, T, E])

    def _layer_norm(self, x: tf.Tensor, ln: nn.LayerNorm) -> tf.Tensor:
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
        x = (x - mean) * tf.math.rsqrt(var + ln.eps)
        # gamma and beta as (1, n) rows: the converter folds a 1-D scale or shift that feeds a
        # FULLY_CONNECTED into that layer's weight or bias, a new copy per layer application.
        return x * self._w(ln.weight, row=True) + self._w(ln.bias, row=True)

    def _attention(self, x: tf.Tensor, mask_bias: tf.Tensor, att) -> tf.Tensor:
        nh, hd, H = att.num_heads, att.head_dim, self.config.hidden_size
        split = self._shape(x, nh, hd)

        def heads(t: tf.Tensor) -> tf.Tensor:
            return tf.transpose(tf.reshape(t, split), [0, 2, 1, 3])  # (B, nh, T, hd)

        q, k, v = heads(self._linear(x, att.query)), heads(self._linear(x, att.key)), heads(self._linear(x, att.value))
        # The scale comes after the matmul: folded into the query weight it would be a new
        # copy of that weight.
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(hd)  # (B, nh, T, T)
        probs = tf.nn.softmax(scores + mask_bias, axis=-1)
        context = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]), self._shape(x, H))  # (B, T, H)
        return self._layer_norm(x + self._linear(context, att.dense), att.LayerNorm)

    def _layer(self, x: tf.Tensor, mask_bias: tf.Tensor, layer: AlbertLayer) -> tf.Tensor:
        a = self._attention(x, mask_bias, layer.attention)
        f = self._linear(self._act(self._linear(a, layer.ffn)), layer.ffn_output)
        return self._layer_norm(a + f, layer.full_layer_layer_norm)

    def _encode(self, albert: AlbertModel, input_ids, attention_mask, token_type_ids) -> tf.Tensor:
        x, mask_bias = self._embed(albert, input_ids, attention_mask, token_type_ids)
        for group, times in self.config.group_runs():
            x = self._group(x, mask_bias, albert.encoder.albert_layer_groups[group].albert_layers, times)
        return x

    def _embed(self, albert: AlbertModel, input_ids, attention_mask, token_type_ids) -> tuple[tf.Tensor, tf.Tensor]:
        """The (B, T, H) input of the first layer application and the (B, 1, 1, T) mask bias."""
        emb, enc = albert.embeddings, albert.encoder
        x = self._lookup(emb.word_embeddings, input_ids) + self._lookup(emb.token_type_embeddings, token_type_ids)
        x = self._add_positions(x, emb.position_embeddings, input_ids)  # (B, T, E)
        x = self._layer_norm(x, emb.LayerNorm)
        # (B, 1, 1, T): computed once, shared by every layer application.
        mask = tf.cast(attention_mask, tf.float32)
        if self.static_len is None:  # no RESHAPE to (B, 1, 1, T), whose shape would be a PACK (see _shape)
            mask = tf.expand_dims(tf.expand_dims(mask, 1), 1)
        else:
            mask = tf.reshape(mask, [1, 1, 1, self.static_len])
        mask_bias = (1.0 - mask) * MASK_VALUE
        # Its bias as a row: a 1-D shift feeding the first layer's Q/K/V would be folded into
        # their biases, a second copy of them for the first layer application. (Google's layout
        # has no projection when E = H.)
        if enc.embedding_hidden_mapping_in is not None:
            x = self._linear(x, enc.embedding_hidden_mapping_in, row_bias=True)  # (B, T, H)
        return x, mask_bias

    def _group(self, x: tf.Tensor, mask_bias: tf.Tensor, layers, times: int) -> tf.Tensor:
        """``layers`` (one weight group) applied ``times`` times in a row: unrolled, or as one
        ``tf.while_loop`` whose body holds the group once. The converter writes the loop as a
        WHILE operator calling a body subgraph: a runtime that packs weights per operator (the
        TFLite Interpreter's XNNPACK delegate, with default options) packs the group once
        instead of once per application."""
        def apply(x: tf.Tensor) -> tf.Tensor:
            for layer in layers:
                x = self._layer(x, mask_bias, layer)
            return x

        if self.layers == "unrolled" or times == 1:
            for _ in range(times):
                x = apply(x)
            return x
        shape = tf.shape(x) if self.static_len is None else x.shape
        _, x = tf.while_loop(lambda i, _: i < times, lambda i, x: (i + 1, apply(x)), [tf.constant(0), x],
                             maximum_iterations=times)
        # The WHILE's output is a dynamic tensor once the input is resized; LiteRT's CompiledModel
        # cannot bind a model output to one (a base model's last_hidden_state would be it). A
        # RESHAPE to the input's shape, which the converter cannot prove a no-op, puts an
        # arena tensor in between.
        return tf.reshape(x, shape)

    def _pool(self, albert: AlbertModel, hidden: tf.Tensor) -> tf.Tensor:
        return tf.tanh(self._linear(self._first_token(hidden), albert.pooler))  # (B, H)

    def _mlm(self, predictions, hidden: tf.Tensor) -> tf.Tensor:
        h = self._layer_norm(self._act(self._linear(hidden, predictions.dense)), predictions.LayerNorm)
        return self._linear(h, predictions.decoder)  # (B, T, V), weight = word embeddings

    # -- serving -------------------------------------------------------------------------------
    def _serve(self, input_ids, attention_mask, token_type_ids) -> dict[str, tf.Tensor]:
        outputs = self._head(self, input_ids, attention_mask, token_type_ids)
        return {name: tf.identity(t, name=name) for name, t in zip(self.output_names, outputs)}

    def _set_exit_setting(self, value: tf.Tensor) -> dict[str, tf.Tensor]:
        """SETTING_SIGNATURE: make ``value`` the exit rule's setting when it is in the rule's range
        (albert_edge.exits.ExitRule.check); return the setting in effect, so an app sees a value
        out of range left the setting as it was."""
        kind, passes = self._model.rule.kind, self.config.num_hidden_layers
        if kind == "patience":
            valid = (value >= 1) & (value <= passes - 1) & tf.equal(value, tf.round(value))
        elif kind == "confidence":
            valid = (value > 0) & (value <= 1)
        else:
            valid = (value >= 0) & tf.math.is_finite(value)
        self.exit_setting.assign(tf.where(valid, value, self.exit_setting.read_value()))
        return {SETTING: tf.identity(self.exit_setting.read_value(), name=SETTING)}

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The functions the file holds by signature key: serving, and for an adaptive classifier
        the one that changes its exit setting."""
        out = {SIGNATURE: self.trace()}
        if hasattr(self, "set_exit_setting"):
            out[SETTING_SIGNATURE] = self.set_exit_setting.get_concrete_function()
        return out

    def trace(self) -> tf.types.experimental.ConcreteFunction:
        """The serving function, traced once; its weights become tracked variables of this
        module, so ``tf.saved_model.save`` stores each of them once."""
        function = self.serving.get_concrete_function()
        self.weights_once = self._w.all() + getattr(self, "extra_weights", [])
        return function


# -- heads: model -> the outputs in output_names order ---------------------------------------
def _base(m: TFAlbert, ids, mask, types):
    albert = m._model
    hidden = m._encode(albert, ids, mask, types)
    return (hidden,) if albert.pooler is None else (hidden, m._pool(albert, hidden))


def _mlm(m: TFAlbert, ids, mask, types):
    model = m._model
    return (m._mlm(model.predictions, m._encode(model.albert, ids, mask, types)),)


def _pretraining(m: TFAlbert, ids, mask, types):
    model = m._model
    hidden = m._encode(model.albert, ids, mask, types)
    pooled = m._pool(model.albert, hidden)
    return m._mlm(model.predictions, hidden), m._linear(pooled, model.sop_classifier.classifier)


def _sequence_classification(m: TFAlbert, ids, mask, types):
    model = m._model
    pooled = m._pool(model.albert, m._encode(model.albert, ids, mask, types))
    return (m._linear(pooled, model.classifier),)


def _token_classification(m: TFAlbert, ids, mask, types):
    model = m._model
    return (m._linear(m._encode(model.albert, ids, mask, types), model.classifier),)


def _question_answering(m: TFAlbert, ids, mask, types):
    model = m._model
    logits = m._linear(m._encode(model.albert, ids, mask, types), model.qa_outputs)  # (B, T, 2)
    if m.static_len is None:
        return logits[..., 0], logits[..., 1]
    start, end = tf.split(logits, 2, axis=-1)  # no shrink-axis slices in a static file
    return tf.reshape(start, [1, m.static_len]), tf.reshape(end, [1, m.static_len])


def _class_probabilities(m: TFAlbert, ids, mask, types):
    model = m._model.classifier
    pooled = m._pool(model.albert, m._encode(model.albert, ids, mask, types))
    return (tf.nn.softmax(m._linear(pooled, model.classifier), axis=-1),)


def _sentence_embedding(m: TFAlbert, ids, mask, types):
    albert = m._model.albert
    hidden = m._encode(albert, ids, mask, types)
    return (m._pool(albert, hidden) if m._model.vector == "pooled" else m._first_token(hidden),)


_HEADS: list[tuple[type, Callable]] = [
    (AlbertModel, _base),
    (AlbertForMaskedLM, _mlm),
    (AlbertForPreTraining, _pretraining),
    (AlbertForSequenceClassification, _sequence_classification),
    (AlbertForTokenClassification, _token_classification),
    (AlbertForQuestionAnswering, _question_answering),
    (ClassProbabilities, _class_probabilities),
    (SentenceEmbedding, _sentence_embedding),
    (AdaptiveClassifier, adaptive_classification),
    (AdaptiveProbabilities, adaptive_probabilities),
]


def _head_fn(model: nn.Module) -> Callable:
    for cls, fn in _HEADS:
        if type(model) is cls:
            return fn
    raise ConversionError(f"{type(model).__name__} is not one of albert_edge.model's ALBERT models")
