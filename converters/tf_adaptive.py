"""The adaptive classifier's graph (``convert --adaptive``): passes that stop once the exit rule
(:mod:`albert_edge.exits`) says the answer is settled, in one of two forms.

- :func:`adaptive_classification`, the loop file (TFLite, LiteRT): WHILE loops whose condition
  carries the rule, the rule's setting a variable that a second signature changes.
- :func:`adaptive_probabilities`, the MediaPipe file: MediaPipe's TextClassifier takes a file of one
  subgraph only (a WHILE file is refused: "Text tflite models are assumed to have a single
  subgraph"; its classification post-processing checks the same), so no WHILE. The passes are
  written out, and after each one the texts it settled leave the batch (WHERE, GATHER): the passes
  after a text stopped run on an empty batch, at the cost of their shape bookkeeping. The setting
  is the one the file is written with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    from .task_heads import AdaptiveClassifier, AdaptiveProbabilities

__all__ = ["adaptive_classification", "adaptive_probabilities"]

# Each function is a head of tf_albert's table: ``m`` is the TFAlbert module writing the graph.


def adaptive_classification(m, ids, mask, types):
    """The passes as tf.while_loops that stop once every input's answer is settled by the exit rule
    (albert_edge.exits), written by the converter as WHILE operators whose condition carries the
    rule: one loop per run of a weight group, its body holding that group once, the state carried
    from one to the next. Each pass's classifier is read from one (L, C, H) stack of the exit
    classifiers and the final one."""
    adaptive: AdaptiveClassifier = m._model
    model, rule, config = adaptive.classifier, adaptive.rule, m.config
    albert, L, C = model.albert, config.num_hidden_layers, config.num_labels
    if not getattr(m, "extra_weights", None):  # created once, however often the function is traced
        heads = [*model.exit_classifiers, model.classifier]
        with tf.init_scope():
            m.extra_weights = [tf.Variable(np.stack([getattr(h, name).detach().cpu().numpy() for h in heads])
                                           .astype(np.float32), trainable=False) for name in ("weight", "bias")]
    weights, biases = m.extra_weights  # (L, C, H), (L, C)
    setting = m.exit_setting.read_value()  # the rule's setting, changed at run time by SETTING_SIGNATURE
    B, _ = m._sizes(ids)
    x, mask_bias = m._embed(albert, ids, mask, types)

    def step(layers):
        def body(i, x, answer, passes, stopped, top_before, same):
            for layer in layers:
                x = m._layer(x, mask_bias, layer)
            logits = tf.matmul(m._pool(albert, x), tf.gather(weights, i), transpose_b=True) + tf.gather(biases, i)
            top = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (B,)
            same = tf.where((i > 0) & tf.equal(top, top_before), same + 1, tf.zeros_like(same))
            settled = (_settled(rule.kind, setting, logits, same) & (i + 1 >= rule.min_passes)) | (i + 1 >= L)
            now = settled & ~stopped
            answer = tf.where(now[:, None], logits, answer)
            passes = tf.where(now, tf.fill(tf.shape(passes), i + 1), passes)
            return i + 1, x, answer, passes, stopped | settled, top, same
        return body

    zeros = tf.zeros(tf.stack([B]), tf.int32)
    state = (tf.constant(0), x, tf.zeros(tf.stack([B, C])), zeros, tf.zeros(tf.stack([B]), tf.bool), zeros, zeros)
    end = 0
    for group, times in config.group_runs():
        end += times
        layers = albert.encoder.albert_layer_groups[group].albert_layers
        state = tf.while_loop(lambda i, x, a, p, stopped, t, s, end=end: (i < end) & ~tf.reduce_all(stopped),
                              step(layers), state, maximum_iterations=times)
    # A WHILE's outputs are dynamic tensors, which LiteRT's CompiledModel cannot bind a model output
    # to; a RESHAPE to the batch's shape puts an arena tensor in between (as _group does).
    return tf.reshape(state[2], tf.stack([B, C])), tf.reshape(state[3], tf.stack([B]))


def _settled(kind: str, setting: tf.Tensor, logits, same):
    """Whether the rule ``kind`` at ``setting`` (a float scalar) stops each input after this pass
    (before the minimum and the last pass)."""
    if kind == "patience":
        return tf.cast(same, tf.float32) >= setting
    probs = tf.nn.softmax(logits, axis=-1)
    if kind == "confidence":
        return tf.reduce_max(probs, axis=-1) >= setting
    entropy = -tf.reduce_sum(probs * tf.math.log(tf.maximum(probs, 1e-30)), axis=-1)
    return entropy <= setting


def adaptive_probabilities(m, ids, mask, types):
    """(softmax of the logits of the pass each text stopped at (B, C), passes (B, 1) float32) in one
    subgraph: after each pass the texts it settled leave the batch. ``rows`` keeps where each text
    still running came from, so the answers are scattered back to their places."""
    outer: AdaptiveProbabilities = m._model
    model, rule, config = outer.adaptive.classifier, outer.adaptive.rule, m.config
    albert, L, C = model.albert, config.num_hidden_layers, config.num_labels
    heads = [*model.exit_classifiers, model.classifier]
    setting = tf.constant(rule.setting, tf.float32)
    B, _ = m._sizes(ids)
    x, mask_bias = m._embed(albert, ids, mask, types)
    rows = tf.range(B)  # (n,): the input row of each text still running
    answer, passes = tf.zeros(tf.stack([B, C])), tf.zeros(tf.stack([B]), tf.int32)
    top_before = same = tf.zeros(tf.stack([B]), tf.int32)
    for i, layers in enumerate(_pass_layers(albert, config)):
        for layer in layers:
            x = m._layer(x, mask_bias, layer)
        logits = m._linear(m._pool(albert, x), heads[i])  # (n, C)
        top = tf.argmax(logits, axis=-1, output_type=tf.int32)
        same = tf.where(tf.equal(top, top_before), same + 1, tf.zeros_like(same)) if i else same
        if i + 1 >= L:
            settled = tf.ones_like(top, tf.bool)
        elif i + 1 < rule.min_passes:
            settled = tf.zeros_like(top, tf.bool)
        else:
            settled = _settled(rule.kind, setting, logits, same)
        done = tf.reshape(tf.where(settled), [-1])  # (k,) of the n running
        at = tf.expand_dims(tf.gather(rows, done), 1)  # (k, 1) input rows
        answer += tf.scatter_nd(at, tf.gather(logits, done), tf.stack([B, C]))
        passes += tf.scatter_nd(at, tf.fill(tf.shape(done), i + 1), tf.stack([B]))
        if i + 1 < L:  # the texts still running go on, alone
            keep = tf.reshape(tf.where(~settled), [-1])
            x, mask_bias, rows = tf.gather(x, keep), tf.gather(mask_bias, keep), tf.gather(rows, keep)
            top_before, same = tf.gather(top, keep), tf.gather(same, keep)
    return tf.nn.softmax(answer, axis=-1), tf.cast(tf.expand_dims(passes, 1), tf.float32)


def _pass_layers(albert, config) -> list:
    """The layers of each pass (one weight group's), in order: ``num_hidden_layers`` of them."""
    groups = albert.encoder.albert_layer_groups
    return [groups[group].albert_layers for group, times in config.group_runs() for _ in range(times)]
