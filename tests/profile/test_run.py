"""`albert_edge.profile.run`: what `albert-edge profile` does, called from Python."""

from __future__ import annotations

import csv
import json

import pytest

from albert_edge.errors import AlbertEdgeError
from albert_edge.profile import (BaselineOptions, EstimateOptions, OutputOptions, ProfileOptions, ProfileSettings,
                                 run)

SETTINGS = ProfileSettings(seq_lens=(8,), threads=(1,), runs=5, min_seconds=0, max_seconds=0.5, warmup=1)


def test_run_measures_writes_compares_and_estimates(onnx_file, tmp_path):
    first = run([onnx_file], ProfileOptions(settings=SETTINGS))
    assert [r.seq_len for r in first.records] == [8] and first.comparisons == [None] and not first.regression
    baseline = tmp_path / "old.json"
    baseline.write_text(json.dumps(first.to_dicts()))
    lines: list[str] = []
    result = run([onnx_file], ProfileOptions(
        settings=SETTINGS, output=OutputOptions(csv=tmp_path / "r.csv", append=str(tmp_path / "r.jsonl")),
        baseline=BaselineOptions(path=baseline, threshold=0.5),
        estimates=EstimateOptions(devices="pi4", calibration=tmp_path / "calibration.json")), progress=lines.append)
    assert [(r.estimated, r.seq_len) for r in result.records] == [(False, 8), (True, 8)]
    measured, estimated = result.comparisons  # one per record; an estimate is never compared
    assert measured is not None and measured.verdict in ("no change", "inconclusive") and estimated is None
    dicts = result.to_dicts()
    assert dicts[0]["baseline_comparison"] == measured.to_dict() and "baseline_comparison" not in dicts[1]
    assert {line.split()[0] for line in lines} == {"profiling", "estimating"}
    with open(tmp_path / "r.csv", newline="") as fh:
        assert [row["estimated"] for row in csv.DictReader(fh)] == ["False", "True"]
    # the files hold the records as measured, without the comparison
    assert [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()] == [
        r.to_dict() for r in result.records]
    assert (tmp_path / "calibration.json").is_file()


@pytest.mark.parametrize("output", ["csv", "append"])
def test_run_refuses_an_output_onto_its_input_before_measuring(onnx_file, output):
    lines: list[str] = []
    with pytest.raises(AlbertEdgeError, match=f"--{output} {onnx_file} is the input"):
        run([onnx_file], ProfileOptions(settings=SETTINGS, output=OutputOptions(**{output: onnx_file})),
            progress=lines.append)
    assert lines == []
