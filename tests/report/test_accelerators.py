"""The report's Accelerators table: per file, what LiteRT's GPU accelerator, NNAPI, Core ML and
the CPU take of it, read from the manifest (GPU) and onnxruntime's own mobile checker (NNAPI,
Core ML); the one sentence naming the file to take for each; the app lines for them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albert_edge.formats.mobile_partitions import mobile_partitions
from albert_edge.report import tables, write_report
from albert_edge.report.accelerators import accelerator_data

from .conftest import SEQ

LLVMPIPE = "llvmpipe (LLVM 15.0.6, 256 bits), arch=software, vendor=mesa, backend=Vulkan, adapterType=CPU / Software"


@pytest.fixture(scope="module")
def static_conversion(tmp_path_factory, tiny_checkpoint) -> Path:
    """model.onnx and model.tflite of convert --static (read-only: copy it before changing anything)."""
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("accel") / "static"
    convert(tiny_checkpoint, out, targets=("onnx", "tflite"), seq_len=SEQ, static=True)
    return out


def _gpu_record(placement: dict | None = None, ran: bool = True, reason: str | None = None) -> dict:
    if not ran:
        return {"ran": False, "reason": reason}
    placement = {"ops": 167, "gpu_ops": 167, "cpu_ops": 0, "fallbacks": [], "refused": False, "reason": None,
                 "adapter": LLVMPIPE, "enforce_f32": True, "runtime": "ai-edge-litert 2.3.0", **(placement or {})}
    return {"ran": True, "enforce_f32": True, "placement": placement, "max_abs_diff": {"last_hidden_state": 4e-7},
            "atol": {"last_hidden_state": 1e-4}, "rtol": {"last_hidden_state": 0.0}, "ok": True}


def _with_gpu(static_conversion: Path, dst: Path, record: dict) -> Path:
    """A copy of the static conversion whose manifest records ``record`` as model.tflite's GPU run."""
    shutil.copytree(static_conversion, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    entry = next(e for e in manifest["files"] if e["name"] == "model.tflite")
    entry["parity"]["gpu"] = record
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture(scope="module")
def both(tmp_path_factory, static_conversion, conversion):
    """The report of a static folder (its manifest saying every operator ran on the GPU) and a
    dynamic one."""
    root = tmp_path_factory.mktemp("both")
    static = _with_gpu(static_conversion, root / "static", _gpu_record())
    return write_report([static, conversion], root / "report", charts=False)


def _rows(data: dict) -> dict[str, dict]:
    return {r["label"]: r for r in data["accelerators"]["rows"]}


def test_one_row_per_file_with_what_each_accelerator_takes(both, conversion):
    rows = _rows(both.data)
    dynamic = conversion.name
    assert set(rows) == {"static/model.onnx", "static/model.tflite", f"{dynamic}/model.onnx",
                         f"{dynamic}/model.tflite", f"{dynamic}/model.int8-dynamic.onnx"}
    gpu = rows["static/model.tflite"]["gpu"]
    assert gpu["status"] == "whole" and gpu["text"].startswith("all 167 ops")
    assert rows[f"{dynamic}/model.tflite"]["gpu"]["text"] == "CPU only: dynamic shapes; convert --static for the GPU"
    assert rows["static/model.onnx"]["nnapi"]["status"] == "whole"
    assert rows["static/model.onnx"]["nnapi"]["text"].startswith("1 partition, every node")
    for name in ("model.onnx", "model.int8-dynamic.onnx"):
        nnapi = rows[f"{dynamic}/{name}"]["nnapi"]
        assert nnapi["status"] != "whole" and nnapi["covered"] < nnapi["nodes"]
    for label, row in rows.items():
        assert row["cpu"]["status"] == "whole", label
        assert (row["gpu"]["status"] == "n/a") == (row["format"] != "tflite"), label
        assert (row["nnapi"]["status"] == "n/a") == (row["format"] != "onnx"), label


def test_partitions_are_the_checkers_own(both):
    """The NNAPI and Core ML cells are onnxruntime's checker on the file, not figures of ours."""
    for row in both.data["accelerators"]["rows"]:
        if row["format"] != "onnx":
            continue
        report = mobile_partitions(next(f["path"] for f in both.data["files"] if f["label"] == row["label"]))
        for key, provider in (("nnapi", "NNAPI"), ("coreml", "CoreML MLProgram")):
            p = report.provider(provider)
            assert (row[key]["partitions"], row[key]["covered"], row[key]["nodes"]) == \
                (p.partitions, p.covered, p.nodes), (row["label"], key)


def test_the_sentence_names_the_file_for_each_accelerator(both, conversion):
    acc = both.data["accelerators"]
    take = {key: t["file"] for key, t in acc["take"].items()}
    assert take["gpu"] == "static/model.tflite"
    assert take["nnapi"] == "static/model.onnx"
    assert take["coreml"] == "static/model.onnx"
    assert take["cpu"].startswith(f"{conversion.name}/")  # a file that takes any length
    sentence = acc["sentence"]
    assert sentence.startswith("For the GPU (LiteRT) take static/model.tflite (all 167 ops on the GPU)")
    assert "for NNAPI, static/model.onnx (1 partition, every node" in sentence
    markdown = (both.out_dir / "report.md").read_text()
    page = (both.out_dir / "report.html").read_text()
    assert sentence in markdown and "| static/model.tflite | static [1, 16] | all 167 ops" in markdown
    assert sentence.replace("'", "&#x27;") in page and 'id="accelerators"' in page
    assert json.loads((both.out_dir / "report.json").read_text())["accelerators"]["sentence"] == sentence


def test_lavapipe_is_named_as_a_device_whose_timings_mean_nothing(both, static_conversion, tmp_path):
    notes = both.data["accelerators"]["notes"]
    assert any("llvmpipe (LLVM 15.0.6, 256 bits) is a software Vulkan device" in n and "means nothing" in n
               for n in notes)
    hardware = _gpu_record({"adapter": "Adreno (TM) 750, arch=adreno, vendor=qualcomm, adapterType=Integrated GPU"})
    data = write_report([_with_gpu(static_conversion, tmp_path / "s", hardware)], tmp_path / "r", charts=False).data
    assert not any("software Vulkan" in n for n in data["accelerators"]["notes"])


@pytest.mark.parametrize("record, cell, status, take", [
    (_gpu_record({"gpu_ops": 158, "cpu_ops": 9, "fallbacks": [{"op": "GATHER", "reason": "Only support 1D indices"}]}),
     "158 of 167 ops; on the CPU: GATHER (Only support 1D indices)", "part", "158 of 167 ops on the GPU"),
    (_gpu_record({"gpu_ops": 0, "cpu_ops": 167, "refused": True, "reason": "tensor#36 is a dynamic-sized tensor"}),
     "refused: tensor#36 is a dynamic-sized tensor", "none", None),
    (_gpu_record(ran=False, reason="no Vulkan device: install Mesa's lavapipe"),
     "not checked: no Vulkan device: install Mesa's lavapipe", "unchecked", "not checked: no Vulkan device"),
])
def test_the_table_follows_the_manifest(static_conversion, tmp_path, record, cell, status, take):
    """Change what the manifest records and the table and the sentence change with it."""
    static = _with_gpu(static_conversion, tmp_path / "static", record)
    data = write_report([static], tmp_path / "report", charts=False).data
    gpu = _rows(data)["model.tflite"]["gpu"]  # one folder: plain names
    assert gpu["text"].startswith(cell) and gpu["status"] == status
    chosen = data["accelerators"]["take"]["gpu"]
    if take is None:
        assert chosen["file"] is None and "no file here" in data["accelerators"]["sentence"]
    else:
        assert chosen["file"] == "model.tflite" and chosen["why"].startswith(take)


def test_without_onnxruntime_the_partitions_say_so(monkeypatch, both):
    from albert_edge.formats import mobile_partitions as checker

    def missing():
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setattr(checker, "_checker_modules", missing)
    data = accelerator_data(both.data["files"])
    onnx = [r for r in data["rows"] if r["format"] == "onnx"]
    assert onnx and all(r["nnapi"]["text"] == "not checked: onnxruntime is not installed here" for r in onnx)
    assert any(n.startswith("NNAPI, Core ML: not checked:") and "onnxruntime" in n for n in data["notes"])
    assert data["take"]["nnapi"]["status"] == "unchecked"


def test_the_cpu_pick_is_the_fastest_measured_file(tmp_path, conversion, profile_json):
    data = write_report([conversion, profile_json], tmp_path / "report", charts=False).data
    records = [r for r in json.loads(profile_json.read_text()) if not r["estimated"]]
    longest = max(r["seq_len"] for r in records)
    fastest = min((r for r in records if r["seq_len"] == longest), key=lambda r: r["latency"]["p50"])
    take = data["accelerators"]["take"]["cpu"]
    assert take["file"] == fastest["file_name"] and f"at {longest} tokens" in take["why"]


def test_app_lines_for_the_accelerators_are_for_the_file_to_take(both):
    from albert_edge.runtime.compiled import read_signature

    groups = {g["key"]: g for g in both.data["snippets"]}
    gpu, nnapi, coreml = groups["litert-gpu"], groups["onnxruntime-nnapi"], groups["onnxruntime-coreml"]
    assert [f["label"] for f in gpu["files"]] == ["static/model.tflite"]
    assert [f["label"] for f in nnapi["files"]] == ["static/model.onnx"]
    assert [f["label"] for f in coreml["files"]] == ["static/model.onnx"]
    assert "2.3.0" in gpu["packages"]["kotlin"]  # the LiteRT version whose accelerator placed the file
    code = gpu["files"][0]["code"]["kotlin"]
    assert "CompiledModel.Options(Accelerator.GPU)" in code
    path = next(f["path"] for f in both.data["files"] if f["label"] == "static/model.tflite")
    _, inputs, _ = read_signature(path)
    for i, spec in enumerate(inputs):  # buffers by position: the signature's order
        assert f"inputs[{i}].writeInt(" in code and f"// {spec.name}" in code.splitlines()[
            next(j for j, line in enumerate(code.splitlines()) if line.startswith(f"inputs[{i}]."))]
    kotlin = nnapi["files"][0]["code"]["kotlin"]
    assert "options.addNnapi(EnumSet.of(NNAPIFlags.CPU_DISABLED))" in kotlin and "IntBuffer" in kotlin
    assert "createMLProgram = true" in coreml["files"][0]["code"]["swift"]
    assert nnapi["files"][0]["code"]["swift"] is None and gpu["files"][0]["code"]["js"] is None


def test_a_gpu_profile_record_stands_in_for_a_missing_manifest_record(static_conversion, tmp_path):
    """A static .tflite whose manifest entry records no GPU run (a quantized one) shows the placement
    of its `profile --accelerator gpu` record; its GPU timing is not a CPU pick and is marked as
    meaning nothing on a software device."""
    from albert_edge.profile import ProfileSettings, profile
    from albert_edge.runtime.accelerator import vulkan_available

    if vulkan_available():
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {vulkan_available()}")
    static = tmp_path / "static"
    shutil.copytree(static_conversion, static)
    manifest = json.loads((static / "manifest.json").read_text())
    for entry in manifest["files"]:
        entry["parity"].pop("gpu", None)
    (static / "manifest.json").write_text(json.dumps(manifest))
    settings = dict(seq_lens=(SEQ,), threads=(1,), runs=2, min_seconds=0.0, warmup=1)
    records = [r.to_dict() for r in profile([static / "model.tflite"], ProfileSettings(**settings, accelerator="gpu"))]
    records += [r.to_dict() for r in profile([static / "model.onnx"], ProfileSettings(**settings))]
    (tmp_path / "profile.json").write_text(json.dumps(records))
    data = write_report([static, tmp_path / "profile.json"], tmp_path / "report", charts=False).data
    gpu = _rows(data)["model.tflite"]["gpu"]
    placement = next(r["placement"] for r in records if r.get("accelerator") == "gpu")
    assert gpu["status"] == ("whole" if placement["cpu_ops"] == 0 else "part")
    assert gpu["ops"] == placement["ops"] and gpu["text"].endswith("(profile --accelerator gpu)")
    assert data["accelerators"]["take"]["cpu"]["file"] == "model.onnx"  # the only CPU record
    profile_table = next(t for t in tables(data) if t.key == "profile")
    assert any(row[3].startswith("LiteRT GPU accelerator, fp32") for row in profile_table.rows)
    if "software" in (placement.get("adapter") or "").lower():
        assert any("their timings mean nothing" in n for n in profile_table.notes)
