"""ProfileJob: one child's whole input, carried as JSON and read back typed, and the record fields
it gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from albert_edge.profile import ProfileJob, ProfileSettings
from albert_edge.profile.job import MEDIAPIPE

SETTINGS = ProfileSettings(seq_lens=(8, 16), threads=(1,), text="builtin", tokenizer=Path("t/spiece.model"),
                           ops=True, ci_target=0.05, web_dir=Path("web"))


def test_a_job_comes_back_from_its_json_as_it_was():
    job = ProfileJob(file="/m/model.tflite", file_as_given="model.tflite", file_bytes=10, sha256="ab",
                     settings=SETTINGS, threads=1, batch=1, seq_len=None, delegate="xnnpack", engine=MEDIAPIPE,
                     task="TextClassifier", input_shape=(1, 128), workdir="/tmp/w", machine_before={"busy_cores": 0.1})
    back = ProfileJob.from_json(job.to_json())
    assert back == job
    assert isinstance(back.settings.tokenizer, Path) and back.input_shape == (1, 128)
    assert back.settings.seq_lens == (8, 16) and isinstance(back.settings.web_dir, Path)


def test_the_record_takes_the_file_and_shape_from_its_job():
    job = ProfileJob(file="/m/model.onnx", file_as_given="m/model.onnx", file_bytes=10, sha256="ab", settings=SETTINGS,
                     threads=2, batch=3, seq_len=8, provider="cpu", machine_before={"load": 1})
    reading = {"cpu_model": "x", "temperatures": {}, "throttled": None, "cpu_freq_khz": 1, "governor": "g", "os": "o"}
    record = job.record(before=reading, after={**reading, "governor": "h"}, during={"busy_cores": 1.0},
                        format="onnx", scheme=None, runtime="onnxruntime", runtime_version="1", provider="CPU",
                        load_ms=1.0, first_call_ms=1.0, latency=None, memory=None)
    assert (record.file, record.file_name, record.file_bytes, record.sha256) == ("m/model.onnx", "model.onnx", 10, "ab")
    assert (record.threads, record.batch, record.seq_len, record.input_mode) == (2, 3, 8, "fixed")
    assert record.device["after"] == {"temperatures": {}, "throttled": None, "cpu_freq_khz": 1, "governor": "h"}
    assert record.machine == {"before": {"load": 1}, "during": {"busy_cores": 1.0}} and record.created
    measured = dict(format="onnx", scheme=None, runtime="r", runtime_version="1", provider="p", load_ms=None,
                    first_call_ms=None, latency=None, memory=None)
    # a web runtime may run other threads than asked; real text has no fixed length
    assert job.record(before=reading, after=reading, during=None, threads=1, **measured).threads == 1
    text = dataclasses.replace(job, seq_len=None)
    assert text.record(before=reading, after=reading, during=None, **measured).input_mode == "real-text"
