"""Export an ALBERT model to a .tflite file that MediaPipe Tasks and the TFLite Task Library load
as it is: TFLite metadata naming the task's inputs and outputs, the tokenizer inside the file.

- A sequence-classification model becomes a ``TextClassifier`` file: its output is the class
  probabilities (softmax of the logits, :class:`.task_heads.ClassProbabilities`), its labels the
  checkpoint's ``id2label``, checked by :func:`albert_edge.labels.check_labels` before anything is
  exported (one non-empty, single-line, distinct name per class; "LABEL_0" placeholders refused:
  the app would show them).
- The base model becomes a ``TextEmbedder`` file with one output, the sentence vector: the
  pooler output by default, or the [CLS] hidden state (:data:`.task_heads.EMBEDDINGS`).

The graph is the project's TFLite export (:mod:`.tflite`: builtin ops, each shared weight stored
once) with int32 inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` of shape
(1, seq_len): these engines run one text at a time at that fixed length, padding every text to it.
MediaPipe's metadata writer (mediapipe 0.10.21, ``albert-edge[mobile]``) adds the metadata and
packs the files (spiece.model, labels.txt) after the flatbuffer; weights are not copied (checked
by reading the file back). The embedded spiece.model does ALBERT's accent stripping and lower
casing in its own normalizer (:mod:`.spiece_rules`), since the engines feed raw text to
sentencepiece. Before the file is moved in place, the engine's own task answers real texts and
must agree with albert_edge.runtime on the same file fed albert-edge's tokenizer ids
(:mod:`.mediapipe_check`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from albert_edge.errors import ConversionError, optional_import, user_message
from albert_edge.labels import CONFIG_FIX, check_labels

from .mediapipe_check import MOBILE_EXTRA

__all__ = ["export", "check_seq_len", "MIN_SEQ_LEN", "file_model", "task_of", "with_parent_metadata", "verified_model",
           "writers", "TaskFile", "classifier_metadata", "MOBILE_EXTRA", "CLASSIFIER_OUTPUT", "PASSES", "VECTOR"]

log = logging.getLogger(__name__)

CLASSIFIER_OUTPUT = "probability"  # the classifier's output tensor in the metadata (classifier_metadata)
PASSES = "passes"  # an adaptive classifier's second head (classifier_metadata), its one category
VECTOR = "pooled"  # the TextEmbedder file's vector (task_heads.EMBEDDINGS)
_SPIECE_NAME = "spiece.model"  # the associated file's name inside the .tflite
# The shortest length of a file: MediaPipe's BertPreprocessorCalculator takes 2 and up
# (bert_max_seq_len >= 2: mediapipe/calculators/tensor/bert_preprocessor_calculator.cc,
# UpdateContract), which is [CLS] and [SEP] with no text between; the file is checked on text.
MIN_SEQ_LEN = 3


@dataclass(frozen=True)
class TaskFile:
    """What the metadata says: the task, and the labels of a classifier."""

    task: str  # "TextClassifier" | "TextEmbedder"
    labels: tuple[str, ...] = ()
    passes: bool = False  # an adaptive classifier's: a second head, one category scored with the passes run

    @property
    def outputs(self) -> tuple[str, ...] | None:
        """The file's outputs by name in head order, where it has more than one."""
        from .task_heads import AdaptiveProbabilities

        return AdaptiveProbabilities.output_names if self.passes else None


def task_of(model) -> TaskFile:
    """The MediaPipe task ``model`` becomes; ConversionError for a head no text task carries."""
    from albert_edge.model import AlbertForSequenceClassification, AlbertModel

    from .task_heads import AdaptiveClassifier

    if isinstance(model, AdaptiveClassifier):  # convert --adaptive: the classifier's task, and its passes
        return replace(task_of(model.classifier), passes=True)
    if isinstance(model, AlbertForSequenceClassification):
        labels = tuple(model.config.label_names or ())
        if not labels:  # config.json had no id2label, or only transformers' LABEL_0, LABEL_1, ...
            raise ConversionError("the mediapipe target needs label names: the checkpoint's config.json has no "
                                  f"id2label (or only LABEL_0, LABEL_1, ...); {CONFIG_FIX} to name each class as "
                                  "an app should show it")
        return TaskFile("TextClassifier", check_labels(labels, model.config.num_labels,
                                                       where="the checkpoint's config.json id2label"))
    if isinstance(model, AlbertModel):
        return TaskFile("TextEmbedder")
    from .outputs import head_of

    raise ConversionError(f"the mediapipe target carries a 'classification' head (TextClassifier) or the 'base' "
                          f"model (TextEmbedder), not the {head_of(model)!r} head")


def file_model(model, vector: str = VECTOR):
    """The PyTorch module whose outputs the file holds (what verify compares it with)."""
    from .task_heads import AdaptiveProbabilities, ClassProbabilities, SentenceEmbedding

    task = task_of(model)
    if task.passes:
        return AdaptiveProbabilities(model).eval()
    if task.task == "TextClassifier":
        return ClassProbabilities(model).eval()
    return SentenceEmbedding(model, vector if model.pooler is not None else "cls").eval()


def writers():
    """MediaPipe's metadata writer module; ConversionError naming the extra when absent."""
    from .native_logs import quiet_native, quiet_tensorflow_env

    quiet_tensorflow_env()  # it loads TensorFlow (and jax, which would set a level of its own)
    with quiet_native(tensorflow=True):  # TensorFlow's start-up lines (dropped with our error too)
        try:
            return optional_import("mediapipe.tasks.python.metadata.metadata_writers.metadata_writer")
        except ImportError as exc:
            raise ConversionError(f"the mediapipe target needs MediaPipe's metadata writer ({exc.name or exc} did "
                                  f"not import): {MOBILE_EXTRA}") from None


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, tokenizer=None) -> Path:
    """Write ``model`` (a labelled classifier or the base model) to ``out_path`` as a MediaPipe
    text task file with ``tokenizer``'s spiece.model inside, checked through MediaPipe itself.
    The file is written at ``out_path`` (``convert`` writes it in the folder it stages) and removed
    when the check fails."""
    from . import tflite
    from .mediapipe_check import check_task
    from .spiece_rules import checked_spiece, with_albert_normalizer

    out_path = Path(out_path)
    check_seq_len(seq_len)
    task = task_of(model)
    if tokenizer is None:
        raise ConversionError("the mediapipe target embeds the tokenizer: the checkpoint directory needs its "
                              "spiece.model")
    spiece = checked_spiece(tokenizer, model, "mediapipe")
    writer = writers()
    inner = file_model(model)
    try:
        # the plain graph first, at the same name; the file with its metadata replaces it
        tflite.export(inner, out_path, seq_len=seq_len, layers="unrolled")  # the text tasks take one subgraph
        buffer = _heads_in_order(_fixed_length(bytearray(out_path.read_bytes()), seq_len), inner.output_names)
        with tempfile.TemporaryDirectory(prefix="albert-edge-mediapipe-") as scratch:
            embedded = Path(scratch) / _SPIECE_NAME
            embedded.write_bytes(with_albert_normalizer(spiece))
            populated = _with_metadata(buffer, task, embedded, writer, inner)
        del buffer
        out_path.write_bytes(populated)
        del populated
        check_task(out_path, task, spiece, seq_len)
    except BaseException as exc:  # a file MediaPipe refuses is not left as if it were good
        out_path.unlink(missing_ok=True)
        if isinstance(exc, OSError) and user_message(exc) is None:
            raise ConversionError(f"cannot write {out_path}: {exc.strerror or exc}") from None
        raise
    log.info("wrote %s (%s, %d bytes)", out_path.name, task.task, out_path.stat().st_size)
    return out_path


def check_seq_len(seq_len: int) -> None:
    """A mediapipe file's fixed length is at least :data:`MIN_SEQ_LEN`: checked before anything is
    exported (MediaPipe's own check fails only when the finished file is opened)."""
    if isinstance(seq_len, int) and not isinstance(seq_len, bool) and seq_len < MIN_SEQ_LEN:
        raise ConversionError(f"--seq-len {seq_len} is too short for the mediapipe target: the file reads [CLS], "
                              f"the text and [SEP] at that fixed length (MediaPipe refuses a length under 2, and 2 "
                              f"leaves no room for text); give --seq-len {MIN_SEQ_LEN} or more")


def with_parent_metadata(flatbuffer: bytes, parent: str | os.PathLike, seq_len: int,
                         heads: tuple[str, ...]) -> bytes:
    """``flatbuffer`` (the same task's graph, rebuilt: a quantized one) at ``parent``'s fixed
    length, its outputs in the order of ``heads``, with ``parent``'s metadata and packed files
    copied in by MediaPipe's populator."""
    try:
        metadata = optional_import("mediapipe.tasks.python.metadata.metadata")
    except ImportError as exc:
        raise ConversionError(f"{Path(parent).name} carries MediaPipe metadata, which a quantized file must keep: "
                              f"MediaPipe's metadata tools did not import ({exc.name or exc}): "
                              f"{MOBILE_EXTRA}") from None
    displayer = metadata.MetadataDisplayer.with_model_file(str(parent))
    files = {name: displayer.get_associated_file_buffer(name) for name in displayer.get_packed_associated_file_list()}
    fixed = _heads_in_order(_fixed_length(bytearray(flatbuffer), seq_len), heads)
    populator = metadata.MetadataPopulator.with_model_buffer(bytes(fixed))
    populator.load_metadata_buffer(displayer.get_metadata_buffer())
    populator.load_associated_file_buffers(files)
    populator.populate()
    return populator.get_model_buffer()


def verified_model(model):
    """What :func:`albert_edge.converters.export.convert` verifies the file against."""
    return file_model(model)


def _fixed_length(buffer: bytearray, seq_len: int) -> bytearray:
    """``buffer`` with its inputs' shape signatures set to (1, seq_len), in place. With a
    dynamic signature MediaPipe feeds each text at its own token count, untruncated: a text
    longer than the position table fails in the app; with a fixed one it truncates and pads."""
    from .tflite import _schema, _signature_tensors

    schema = _schema()
    subgraph, inputs, _ = _signature_tensors(schema.Model.GetRootAs(buffer, 0), schema)
    for index in inputs.values():
        tensor = subgraph.Tensors(index)
        if not tensor.ShapeSignatureIsNone():
            tensor.ShapeSignatureAsNumpy()[:] = (1, seq_len)  # a writable view into the bytearray
    return buffer


def _heads_in_order(buffer: bytearray, names: tuple[str, ...]) -> bytearray:
    """``buffer`` with its subgraph's outputs in the order of ``names``, in place. MediaPipe reads
    each output as a classification head by its position; the converter orders them by name, which
    would put an adaptive file's passes before its class scores."""
    from .tflite import _schema

    model = _schema().Model.GetRootAs(buffer, 0)
    sig = model.SignatureDefs(0)
    index = {sig.Outputs(i).Name().decode(): sig.Outputs(i).TensorIndex() for i in range(sig.OutputsLength())}
    model.Subgraphs(sig.SubgraphIndex()).OutputsAsNumpy()[:] = [index[n] for n in names]  # a view into buffer
    return buffer


def _input_tensor_names(buffer: bytes) -> dict[str, str]:
    """Input name -> the tensor's own name (what the metadata writer matches): the signature's
    inputs, or, in a file without one, the subgraph's inputs whose names hold the input names."""
    from albert_edge.formats.graph import INPUT_NAMES
    from albert_edge.formats.tflite_schema import Model

    model = Model.GetRootAs(buffer, 0)
    if model.SignatureDefsLength():
        sig = model.SignatureDefs(0)
        sub = model.Subgraphs(sig.SubgraphIndex())
        return {m.Name().decode(): sub.Tensors(m.TensorIndex()).Name().decode()
                for m in map(sig.Inputs, range(sig.InputsLength()))}
    sub = model.Subgraphs(0)
    tensors = [sub.Tensors(int(i)).Name().decode() for i in sub.InputsAsNumpy()]
    return {name: next(t for t in tensors if name in t) for name in INPUT_NAMES}


def classifier_metadata(writer, buffer: bytes, tokenizer, labels: list[str], names: dict[str, str],
                        passes: bool = False):
    """MediaPipe's metadata writer set up for a BERT-style text classifier: what its
    ``text_classifier.MetadataWriter.create_for_bert_model`` writes, but with the output named
    :data:`CLASSIFIER_OUTPUT`. The TFLite Task Library's BertNLClassifier (tflite-support 0.4.4)
    looks the output up by that name and crashes the app (a null tensor) when the file says
    "score", the writer's default; MediaPipe's TextClassifier reads the output by position.
    ``passes``: an adaptive file's second output, a head of one category, :data:`PASSES`."""
    made = writer.MetadataWriter.create(buffer)
    made.add_general_info("TextClassifier", "Classify the input text into a set of known categories.")
    made.add_bert_text_input(tokenizer, names["input_ids"], names["attention_mask"], names["token_type_ids"])
    made.add_classification_output(writer.Labels().add(labels), name=CLASSIFIER_OUTPUT,
                                   description="Probability of each label.")
    if passes:
        # its own label file: the writer names every one labels.txt, and the second would replace the first
        made.add_classification_output(writer.Labels().add([PASSES], exported_filename=PASSES), name=PASSES,
                                       description="The passes of the shared layers run before the answer settled.")
    return made


def _with_metadata(buffer: bytes, task: TaskFile, spiece: Path, writer, inner) -> bytes:
    """``buffer`` with the task's metadata and files, written by MediaPipe's metadata writer."""
    from .task_heads import EMBEDDINGS

    names = _input_tensor_names(buffer)
    tokenizer = writer.SentencePieceTokenizer(str(spiece))
    try:
        if task.task == "TextClassifier":
            made = classifier_metadata(writer, buffer, tokenizer, list(task.labels), names, task.passes)
        else:
            made = writer.MetadataWriter.create(buffer)
            made.add_general_info("TextEmbedder", "ALBERT: one vector per text.")
            made.add_bert_text_input(tokenizer, names["input_ids"], names["attention_mask"], names["token_type_ids"])
            made.add_feature_output(name="embedding", description=f"ALBERT sentence vector: {EMBEDDINGS[inner.vector]}")
        populated, _ = made.populate()
    except (ValueError, RuntimeError) as exc:
        raise ConversionError(f"MediaPipe's metadata writer refused the model: {exc}") from None
    return populated
