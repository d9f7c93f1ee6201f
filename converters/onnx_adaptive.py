"""An adaptive classifier (:class:`.task_heads.AdaptiveClassifier`) as ONNX: the passes of ALBERT's
shared layer in ``Loop`` nodes whose condition output carries the exit rule, so onnxruntime runs
only the passes each input needs.

The TorchScript exporter cannot write a loop whose end depends on the data, so the graph is put
together from traced pieces: the embeddings with the loop's starting state, and one step per run
of a weight group (the group's layers, the pass's classifier, the rule), traced once and made the
body of a ``Loop``. Every piece is traced from the same module tree, so a weight has one name in
all of them and is stored once, in the main graph, where each body reads it from the outer scope.
The classifiers of the passes are one (L, H, C) stack, read by the pass's index.

Outputs: ``logits`` (B, num_labels) of the pass each input stopped at, ``passes`` (B,) int32.
An optional input, ``exit_setting`` (a float scalar whose default is the rule's setting: its
patience, confidence or entropy), lets an app trade speed for accuracy without another file.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import onnx
import torch
from onnx import TensorProto, helper
from torch import Tensor, nn

from albert_edge.errors import ConversionError
from albert_edge.exits import RULE_METADATA, SETTING  # SETTING: the optional input, its default stored with it

from albert_edge.formats.graph import INPUT_NAMES

from .task_heads import AdaptiveClassifier

__all__ = ["adaptive_proto", "SETTING"]

# The loop's state, carried from pass to pass and from one loop to the next.
_STATE = ("pass", "hidden", "answer", "passes", "stopped", "top", "same")


class _Stack(nn.Module):
    """The classifiers of every pass, the last one the model's own, as one (L, H, C) stack."""

    def __init__(self, adaptive: AdaptiveClassifier):
        super().__init__()
        heads = [*adaptive.classifier.exit_classifiers, adaptive.classifier.classifier]
        self.weight_t = nn.Parameter(torch.stack([h.weight.detach().t() for h in heads]), requires_grad=False)
        self.bias = nn.Parameter(torch.stack([h.bias.detach() for h in heads]), requires_grad=False)


class _Start(nn.Module):
    """(input_ids, attention_mask, token_type_ids) -> the first layer's input, the mask bias and
    the loop's starting state."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor):
        albert = self.model.classifier.albert
        x, mask_bias = albert._embed(input_ids, attention_mask, token_type_ids)
        if albert.encoder.embedding_hidden_mapping_in is not None:
            x = albert.encoder.embedding_hidden_mapping_in(x)  # (B, T, H)
        flags = torch.zeros_like(input_ids[:, 0])  # (B,) int64
        answer = torch.zeros_like(x[:, 0, :self.model.config.num_labels])  # (B, C)
        return (x, mask_bias, torch.zeros((), dtype=torch.int64), answer, flags, torch.zeros_like(flags, dtype=torch.bool),
                flags, flags)


class _Step(nn.Module):
    """One pass: the group's layers, the pass's classifier and the rule; ``go_on`` is the Loop's
    condition: passes left in this run and an input not yet settled."""

    def __init__(self, model: nn.Module, group: int, end: int):
        super().__init__()
        self.model, self.group, self.end = model, group, end

    def forward(self, i: Tensor, x: Tensor, answer: Tensor, passes: Tensor, stopped: Tensor, top_before: Tensor,
                same: Tensor, mask_bias: Tensor, setting: Tensor):
        adaptive = self.model
        rule, L = adaptive.rule, adaptive.config.num_hidden_layers
        albert = adaptive.classifier.albert
        x = albert.encoder.albert_layer_groups[self.group](x, mask_bias)
        logits = torch.matmul(albert.pool(x), self.model.stack.weight_t[i]) + self.model.stack.bias[i]  # (B, C)
        top = logits.argmax(-1)
        same = torch.where((i > 0) & (top == top_before), same + 1, torch.zeros_like(same))
        if rule.kind == "patience":
            settled = same.to(setting.dtype) >= setting
        else:
            probs = torch.softmax(logits, -1)
            if rule.kind == "confidence":
                settled = probs.max(-1).values >= setting
            else:
                settled = -(probs * torch.log(probs.clamp(min=1e-30))).sum(-1) <= setting
        settled = (settled & (i + 1 >= rule.min_passes)) | (i + 1 >= L)
        now = settled & ~stopped
        answer = torch.where(now[:, None], logits, answer)
        passes = torch.where(now, torch.zeros_like(passes) + i + 1, passes)
        stopped = stopped | settled
        go_on = (i + 1 < self.end) & ~stopped.all()
        return go_on, i + 1, x, answer, passes, stopped, top, same


class _Traced(nn.Module):
    """The module tree every piece is traced from, so that each weight has one name in all."""

    def __init__(self, adaptive: AdaptiveClassifier):
        super().__init__()
        self.classifier = adaptive.classifier
        self.rule, self.config = adaptive.rule, adaptive.config
        self.stack = _Stack(adaptive)


def adaptive_proto(adaptive: AdaptiveClassifier, opset: int, linears_as_matmul) -> onnx.ModelProto:
    """The adaptive classifier as one ONNX model (weights not yet deduplicated by value)."""
    model = _Traced(adaptive).eval()
    config = adaptive.config
    runs = config.group_runs()
    with tempfile.TemporaryDirectory(prefix=".onnx-adaptive-") as tmp, linears_as_matmul(model):
        start = _trace(_Start(model).eval(), _start_example(config), list(INPUT_NAMES),
                       ["hidden0", "mask_bias", *(f"{s}0" for s in _STATE if s != "hidden")], Path(tmp) / "start.onnx",
                       opset, {n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES})
        steps, end = [], 0
        for k, (group, times) in enumerate(runs):
            end += times
            steps.append((_trace(_Step(model, group, end).eval(), _step_example(config),
                                 [f"{s}_in" for s in _STATE] + ["mask_bias", SETTING],
                                 ["go_on", *(f"{s}_out" for s in _STATE)],
                                 Path(tmp) / f"step{k}.onnx", opset, _step_axes()), times))
    proto = _stitch(start, steps, config.num_labels, opset, adaptive.rule.setting)
    rule = {**adaptive.rule.to_dict(), "passes": config.num_hidden_layers}
    helper.set_model_props(proto, {RULE_METADATA: json.dumps(rule)})  # what a run-time setting is checked against
    return proto


def _start_example(config):
    ids = torch.randint(0, config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    return ids, torch.ones_like(ids), torch.zeros_like(ids)


def _step_example(config):
    B, T, H, C = 2, 5, config.hidden_size, config.num_labels
    flags = torch.zeros(B, dtype=torch.int64)
    return (torch.tensor(1), torch.randn(B, T, H), torch.zeros(B, C), flags, flags.to(torch.bool), flags, flags,
            torch.zeros(B, 1, 1, T), torch.tensor(0.5))


def _step_axes() -> dict[str, dict[int, str]]:
    batch = {0: "batch"}
    axes = {f"{s}_in": batch for s in _STATE if s != "pass"} | {f"{s}_out": batch for s in _STATE if s != "pass"}
    axes.update(hidden_in={0: "batch", 1: "sequence"}, hidden_out={0: "batch", 1: "sequence"},
                mask_bias={0: "batch", 3: "sequence"})
    return axes


def _trace(module: nn.Module, example, inputs: list[str], outputs: list[str], path: Path, opset: int,
           axes: dict) -> onnx.ModelProto:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer chatter; the file is verified
        try:
            torch.onnx.export(module, example, str(path), dynamo=False, opset_version=opset, input_names=inputs,
                              output_names=outputs, dynamic_axes=axes, do_constant_folding=True)
        except Exception as exc:  # torch raises many types; the message is what matters
            raise ConversionError(f"torch.onnx.export failed: {str(exc).strip().splitlines()[0]}") from None
    return onnx.load(str(path))


def _stitch(start: onnx.ModelProto, steps: list[tuple[onnx.ModelProto, int]], classes: int,
            opset: int, setting: float) -> onnx.ModelProto:
    weights = {t.name: t for t in start.graph.initializer}
    # An input with an initializer of its name: the default, replaced when an app feeds it.
    weights[SETTING] = helper.make_tensor(SETTING, TensorProto.FLOAT, [], [setting])
    nodes = list(start.graph.node)
    state = [f"{s}0" if s != "hidden" else "hidden0" for s in _STATE]
    for k, (step, times) in enumerate(steps):
        for t in step.graph.initializer:
            weights.setdefault(t.name, t)  # the same weight by the same name in every piece: once
        going = _going(k, state[_STATE.index("stopped")], nodes)
        body = _body(step, k)
        after = [f"r{k}/{s}" for s in _STATE]
        trips = helper.make_tensor(f"r{k}/trips", TensorProto.INT64, [], [times])
        nodes.append(helper.make_node("Constant", [], [f"r{k}/trips"], value=trips))
        nodes.append(helper.make_node("Loop", [f"r{k}/trips", going, *state], after, name=f"passes_{k}", body=body))
        state = after
    nodes.append(helper.make_node("Identity", [state[_STATE.index("answer")]], ["logits"]))
    nodes.append(helper.make_node("Cast", [state[_STATE.index("passes")]], ["passes"], to=TensorProto.INT32))
    graph = helper.make_graph(
        nodes, "albert_adaptive",
        [*start.graph.input, helper.make_tensor_value_info(SETTING, TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
         helper.make_tensor_value_info("passes", TensorProto.INT32, ["batch"])],
        initializer=list(weights.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=start.ir_version)


def _going(k: int, stopped: str, nodes: list) -> str:
    """The first condition of run ``k``: an input not yet settled (always, before the first run)."""
    if k == 0:
        nodes.append(helper.make_node("Constant", [], ["go0"], value=helper.make_tensor("t", TensorProto.BOOL,
                                                                                        [], [True])))
        return "go0"
    prefix = f"go{k}"
    nodes += [helper.make_node("Not", [stopped], [f"{prefix}/open"]),
              helper.make_node("Cast", [f"{prefix}/open"], [f"{prefix}/open_i"], to=TensorProto.INT32),
              helper.make_node("ReduceMax", [f"{prefix}/open_i"], [f"{prefix}/any"], keepdims=0),
              helper.make_node("Cast", [f"{prefix}/any"], [prefix], to=TensorProto.BOOL)]
    return prefix


def _body(step: onnx.ModelProto, k: int) -> onnx.GraphProto:
    """The traced step as a Loop body: (iteration, condition, state...) -> (condition, state...)."""
    prefix = f"r{k}/body/"
    outer = {t.name for t in step.graph.initializer} | {"mask_bias", SETTING}

    def name(n: str) -> str:
        return n if not n or n in outer else prefix + n

    nodes = []
    for node in step.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = prefix + (node.name or node.op_type)
        copy.input[:] = [name(n) for n in node.input]
        copy.output[:] = [name(n) for n in node.output]
        nodes.append(copy)
    by_name = {v.name: v for v in step.graph.input}
    inputs = [helper.make_tensor_value_info(prefix + "iteration", TensorProto.INT64, []),
              helper.make_tensor_value_info(prefix + "condition", TensorProto.BOOL, [])]
    inputs += [_renamed(by_name[f"{s}_in"], prefix) for s in _STATE]
    outputs = [_renamed(v, prefix) for v in step.graph.output]
    return helper.make_graph(nodes, f"pass_step_{k}", inputs, outputs)


def _renamed(value: onnx.ValueInfoProto, prefix: str) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    copy.name = prefix + value.name
    return copy
