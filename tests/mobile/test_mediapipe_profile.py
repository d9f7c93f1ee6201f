"""profile --mediapipe: a MediaPipe file is also timed through MediaPipe Tasks, the text in, as
an app calls it (tokenizer and model), beside the same file through Session fed ids; the records
say which is which, and the text fed has the length asked for, as the packed tokenizer counts it."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.converters.mediapipe_check import task_answers
from albert_edge.profile.inputs import packed_counter, text_of_length
from albert_edge.runtime.mediapipe_tasks import MediaPipeTask

FAST = ["--threads", "1", "--runs", "5", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]


def _profile(*args):
    result = CliRunner().invoke(main, ["profile", *map(str, args), *FAST, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_both_routes_are_timed_and_told_apart(classifier_file, embedder_file, seq_len):
    records = _profile(classifier_file.path, embedder_file.path, "--mediapipe", "--seq-len", f"8,{seq_len}")
    routes = [(r["file_name"], r["runtime"], r["input_kind"], r["seq_len"]) for r in records]
    assert routes == [(f.path.name, runtime, kind, n) for f in (classifier_file, embedder_file)
                      for runtime, kind in (("ai_edge_litert", "token ids"), ("mediapipe", "text"))
                      for n in (8, seq_len)]
    for r in records:
        assert r["latency"]["count"] >= 5 and r["load_ms"] > 0 and r["first_call_ms"] > 0
        if r["runtime"] == "mediapipe":
            assert r["runtime_version"] == MediaPipeTask.version() and r["model"]["max_seq_len"] == seq_len
            said = " ".join(r["warnings"])
            assert "through MediaPipe Tasks' Text" in said and f"{r['seq_len']} tokens as its tokenizer counts" in said
            assert r["memory"]["after_load_rss"] > r["memory"]["before_load_rss"]


def test_real_text_through_mediapipe(classifier_file, classifier_checkpoint):
    records = _profile(classifier_file.path, "--mediapipe", "--text", "builtin", "--tokenizer", classifier_checkpoint,
                       "--no-fixed", "--max-sentences", "20")
    (tasks,) = [r for r in records if r["runtime"] == "mediapipe"]
    assert tasks["input_mode"] == "real-text" and tasks["text"]["sentences"] == 20


def test_the_text_fed_has_the_length_asked_for(classifier_file, seq_len):
    count = packed_counter(classifier_file.path, seq_len)
    task = MediaPipeTask(classifier_file.path, "TextClassifier")
    for n in (2, 8, seq_len):
        feed, calls = text_of_length(count, n)
        assert count(str(feed["text"][0])) == n and calls <= 16
        got = task.run(feed)["scores"]
        want = task_answers(classifier_file.path, "TextClassifier", [str(feed["text"][0])])
        np.testing.assert_allclose(got, want, atol=1e-7)


def test_a_file_without_metadata_is_one_line(tmp_path, classifier_checkpoint, seq_len):
    from albert_edge.converters.export import convert

    out = tmp_path / "plain"
    convert(str(classifier_checkpoint), out, targets=("tflite",), seq_len=seq_len)
    result = CliRunner().invoke(main, ["profile", str(out / "model.tflite"), "--mediapipe", "--seq-len", "8", *FAST])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no file given has MediaPipe metadata" in lines[0], lines
