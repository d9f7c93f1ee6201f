"""converters.op_versions: the TFLite runtime table, and the standard-library reader of a
file's operator codes checked against the flatbuffer schema bindings ai-edge-litert ships."""

from __future__ import annotations

import pytest

from albert_edge.formats.op_versions import (
    RUNTIME_VERSIONS,
    TFLITE_RUNTIME_LAST,
    OpVersion,
    min_runtime,
    op_versions,
    runtime_for,
    too_new_for,
    version_key,
)


@pytest.mark.parametrize("op, version, runtime", [
    ("FULLY_CONNECTED", 3, "1.14.0"),  # hybrid, one weight scale
    ("FULLY_CONNECTED", 5, "2.0.0"),  # keep_num_dims
    ("FULLY_CONNECTED", 12, "2.17.0"),  # hybrid, a scale per output channel
    ("TRANSPOSE", 7, "2.14.4"),
    ("TILE", 1, "1.10.1"),
    ("GELU", 1, "2.9.0"),
    ("BROADCAST_TO", 1, None),  # rolled back, never released
    ("FULLY_CONNECTED", 99, None),
    ("NO_SUCH_OP", 1, None),
])
def test_runtime_for(op, version, runtime):
    assert runtime_for(op, version) == runtime


def test_versions_compare_as_numbers():
    assert version_key("2.9") < version_key("2.14") < version_key("2.14.4") < version_key("2.17.0")
    ops = [OpVersion("ADD", 1, 3, "1.5.0"), OpVersion("GELU", 1, 1, "2.9.0"), OpVersion("CAST", 1, 1, "1.10.0")]
    assert min_runtime(ops) == "2.9.0"
    assert min_runtime(ops + [OpVersion("CUSTOM:Foo", 1, 1, None)]) is None
    assert min_runtime([]) == "1.5.0"


def test_too_new_for():
    fc12 = OpVersion("FULLY_CONNECTED", 12, 6, "2.17.0")
    transpose7 = OpVersion("TRANSPOSE", 7, 1, "2.14.4")
    unknown = OpVersion("CUSTOM:Foo", 1, 1, None)
    ops = [OpVersion("ADD", 1, 3, "1.5.0"), fc12, transpose7, unknown]
    assert too_new_for(ops, TFLITE_RUNTIME_LAST) == [fc12, transpose7, unknown]
    assert too_new_for(ops, "2.17") == [unknown]


def test_every_row_is_well_formed():
    codes = [code for code, _ in RUNTIME_VERSIONS.values()]
    assert len(codes) == len(set(codes))
    for op, (_, versions) in RUNTIME_VERSIONS.items():
        known = [v for v in versions.split() if v != "-"]
        assert known, op
        keys = [version_key(v) for v in known]
        assert keys == sorted(keys), f"{op}: a later operator version needs an older runtime"


def _schema():
    return pytest.importorskip("ai_edge_litert.schema_py_generated")


def test_codes_are_the_schema_enum():
    schema = _schema()
    for op, (code, _) in RUNTIME_VERSIONS.items():
        assert getattr(schema.BuiltinOperator, op) == code, op


def _flatbuffer(codes, uses) -> bytes:
    """A model with the operator codes ``codes`` ((name or 'CUSTOM:x', version), ...) used by
    ``uses`` (opcode indices), written with the schema bindings."""
    import flatbuffers

    schema = _schema()
    model = schema.ModelT()
    model.version = 3
    model.operatorCodes = []
    for name, version in codes:
        code = schema.OperatorCodeT()
        if name.startswith("CUSTOM:"):
            code.builtinCode, code.customCode = schema.BuiltinOperator.CUSTOM, name[7:]
        else:
            code.builtinCode = getattr(schema.BuiltinOperator, name)
        code.deprecatedBuiltinCode = min(code.builtinCode, 127)
        code.version = version
        model.operatorCodes.append(code)
    graph = schema.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs = [], [], []
    graph.operators = []
    for index in uses:
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = index, [], []
        graph.operators.append(op)
    model.subgraphs = [graph]
    model.buffers = [schema.BufferT()]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_reads_operator_codes_and_their_use():
    # ADD is builtin code 0 (every field at its default); GELU's code is above 127, so only the
    # new builtin_code field holds it; version 1 is the default and not stored either.
    raw = _flatbuffer([("ADD", 1), ("FULLY_CONNECTED", 12), ("GELU", 1), ("CUSTOM:MyOp", 2)], [1, 0, 1, 2, 1])
    got = op_versions(raw)
    assert got == [
        OpVersion("ADD", 1, 1, "1.5.0"),
        OpVersion("FULLY_CONNECTED", 12, 3, "2.17.0"),
        OpVersion("GELU", 1, 1, "2.9.0"),
        OpVersion("CUSTOM:MyOp", 2, 0, None),
    ]
    assert min_runtime(got) is None
    assert min_runtime(got[:3]) == "2.17.0"


def test_a_path_reads_like_its_bytes(tmp_path):
    raw = _flatbuffer([("FULLY_CONNECTED", 3), ("MUL", 1)], [0, 1])
    (tmp_path / "m.tflite").write_bytes(raw)
    assert op_versions(tmp_path / "m.tflite") == op_versions(raw)
    assert not too_new_for(op_versions(raw), TFLITE_RUNTIME_LAST)


@pytest.mark.parametrize("damage", [
    lambda raw: raw[:4] + b"XXXX" + raw[8:],  # not a TFLite file
    lambda raw: raw[:40],  # cut short
    lambda raw: b"",
])
def test_damaged_files_raise_value_error(damage):
    raw = _flatbuffer([("FULLY_CONNECTED", 3)], [0])
    with pytest.raises(ValueError):
        op_versions(damage(raw))
