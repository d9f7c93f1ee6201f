"""The device side's reading of TFLite metadata (albert_edge.formats.tflite_metadata, standard
library only) against MediaPipe's own MetadataDisplayer, and `albert-edge inspect` showing it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats.tflite_metadata import read_metadata


@pytest.mark.parametrize("which, task", [("classifier_file", "TextClassifier"), ("embedder_file", "TextEmbedder")])
def test_metadata_reads_as_mediapipe_reads_it(which, task, request):
    from mediapipe.tasks.python.metadata.metadata import MetadataDisplayer

    path = request.getfixturevalue(which).path
    ours = read_metadata(path)
    displayer = MetadataDisplayer.with_model_file(str(path))
    theirs = json.loads(displayer.get_metadata_json())["subgraph_metadata"][0]
    assert ours.task == task
    assert ours.inputs == [t["name"] for t in theirs["input_tensor_metadata"]]
    assert sorted(ours.inputs) == ["ids", "mask", "segment_ids"]
    assert ours.outputs == [t["name"] for t in theirs["output_tensor_metadata"]]
    assert ours.tokenizer == "SentencePieceTokenizer" and ours.tokenizer_embedded
    assert ours.tokenizer_files == ["spiece.model"]
    assert ours.packed_files == sorted(displayer.get_packed_associated_file_list())
    if task == "TextClassifier":
        labels = displayer.get_associated_file_buffer("labels.txt").decode().split()
        assert ours.labels == labels and len(labels) == 4
    else:
        assert ours.labels == []


def test_inspect_shows_the_metadata(classifier_file):
    result = CliRunner().invoke(main, ["inspect", str(classifier_file.path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    for shown in ("TFLite metadata", "TextClassifier", "SentencePieceTokenizer (spiece.model: embedded)",
                  "mask, ids, segment_ids", "stored weight bytes", "duplicates"):
        assert shown in result.output, shown
    data = json.loads(CliRunner().invoke(main, ["inspect", str(classifier_file.path), "--json"]).output)
    assert data["metadata"]["task"]["task"] == "TextClassifier" and len(data["metadata"]["task"]["labels"]) == 4
    assert data["duplicates"] == []
