"""The report's app snippets for real MediaPipe files: the task their metadata names, a string in."""

from __future__ import annotations

import pytest

from albert_edge.report import write_report


@pytest.mark.parametrize("fixture, task", [("classifier_file", "TextClassifier"), ("embedder_file", "TextEmbedder")])
def test_a_mediapipe_file_gets_its_tasks_lines(request, tmp_path, fixture, task):
    path = request.getfixturevalue(fixture).path
    report = write_report([path.parent], tmp_path / "report", charts=False)
    (group,) = report.data["snippets"]
    assert group["key"] == "mediapipe" and group["framework"] == f"MediaPipe Tasks ({task})"
    # Other tests may have quantized the fixture's file beside it: this test is about the fp32 one.
    (entry,) = [e for e in group["files"] if e["name"] == path.name]
    assert entry["name"] == "model.mediapipe.tflite" and entry["task"] == task and group["tokenize"] is None
    assert f'{task}.createFromFile(context, "model.mediapipe.tflite")' in entry["code"]["kotlin"]
    assert f"try {task}(modelPath:" in entry["code"]["swift"]
    assert f"{task}.createFromOptions(fileset" in entry["code"]["js"]
    assert f"MediaPipe Tasks ({task})" in (tmp_path / "report" / "report.md").read_text()
    row = next(f for f in report.data["files"] if f["name"] == path.name)
    labels = row["inspect"]["metadata"]["task"]["labels"]
    assert (f"labels: {', '.join(labels)}" in entry["note"]) == (task == "TextClassifier") and entry["seq_len"] == 32
