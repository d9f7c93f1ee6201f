"""Which TFLite runtime a .tflite file needs, from its operator versions.

A TFLite interpreter refuses a file as soon as one operator code names a version its kernels do
not register ("Didn't find op for builtin opcode 'FULLY_CONNECTED' version '12'"), whether or
not an operator uses it. Each (operator, version) pair first appeared in one TensorFlow release;
``RUNTIME_VERSIONS`` holds that table as data, as TensorFlow Lite's own
``tools/versioning/runtime_version.cc`` states it. Versions are TensorFlow's numbering, which
tflite-runtime shares (2.14.0 is the last tflite-runtime release); ai-edge-litert, its
successor, numbers its own releases and supports every version listed here.

Reading the operator codes needs only the standard library and numpy (``tflite_schema``), so
the checks here run on a device with nothing but tflite-runtime.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNTIME_VERSIONS", "TFLITE_RUNTIME_LAST", "OpVersion", "op_versions", "min_runtime", "runtime_for",
           "runtime_report", "too_new_for", "version_key"]

# The last tflite-runtime release: what pip installs on Raspberry Pi OS bookworm (Python 3.11).
TFLITE_RUNTIME_LAST = "2.14.0"

# operator: (builtin code, the first runtime of versions 1, 2, 3, ...). "-" marks a version that
# was never released (BROADCAST_TO 1 was rolled back). "1.5" reads as 1.5.0.
RUNTIME_VERSIONS: dict[str, tuple[int, str]] = {
    "ADD": (0, "1.5 1.14 2.4 2.6 2.13"),
    "AVERAGE_POOL_2D": (1, "1.5 1.14 2.3"),
    "CONCATENATION": (2, "1.5 1.14 2.3 2.14"),
    "CONV_2D": (3, "1.5 1.14 1.14 2.3 2.4 2.9 2.11 2.15"),
    "DEPTHWISE_CONV_2D": (4, "1.5 1.12 1.14 2.2 2.3 2.3 2.11"),
    "DEPTH_TO_SPACE": (5, "2.1 2.5"),
    "DEQUANTIZE": (6, "1.13.1 1.14 1.15 2.2 2.7 2.18"),
    "EMBEDDING_LOOKUP": (7, "1.13 1.14 1.14 2.18"),
    "FLOOR": (8, "1.9"),
    # 3: float input, int8 weights with one scale (hybrid); 9: the same with asymmetric input
    # quantization; 12: hybrid with a scale per output channel.
    "FULLY_CONNECTED": (9, "1.5 1.10 1.14 1.14 2.0 2.1 2.3 2.3 2.3 2.11 2.15 2.17 2.18"),
    "HASHTABLE_LOOKUP": (10, "1.5"),
    "L2_NORMALIZATION": (11, "1.5 1.14"),
    "L2_POOL_2D": (12, "1.5"),
    "LOCAL_RESPONSE_NORMALIZATION": (13, "1.5"),
    "LOGISTIC": (14, "1.14 1.14 2.3"),
    "LSH_PROJECTION": (15, "1.5"),
    "LSTM": (16, "1.7 1.10 1.14 2.3"),
    "MAX_POOL_2D": (17, "1.5 1.14 2.3"),
    "MUL": (18, "1.5 1.14 1.15 2.3 2.6 2.11 2.13"),
    "RELU": (19, "1.5 2.1 2.5"),
    "RELU_N1_TO_1": (20, "1.5"),
    "RELU6": (21, "1.5 1.14 2.5"),
    "RESHAPE": (22, "1.5"),
    "RESIZE_BILINEAR": (23, "1.7 1.14 2.2 2.5"),
    "RNN": (24, "1.5 1.14 2.3"),
    "SOFTMAX": (25, "1.5 1.14 2.3"),
    "SPACE_TO_DEPTH": (26, "1.5 1.14"),
    "SVDF": (27, "1.5 1.14 2.2 2.3"),
    "TANH": (28, "1.14 1.14 2.3"),
    "SKIP_GRAM": (30, "1.5"),
    "EMBEDDING_LOOKUP_SPARSE": (33, "1.5"),
    "PAD": (34, "1.5 1.14 2.4 2.6"),
    "UNIDIRECTIONAL_SEQUENCE_RNN": (35, "1.14 1.14 2.3"),
    "GATHER": (36, "1.6 1.14 1.15 2.4 2.5 2.13 2.15"),
    "BATCH_TO_SPACE_ND": (37, "1.6 1.14 2.3 2.12"),
    "SPACE_TO_BATCH_ND": (38, "1.6 1.14 2.3 2.12"),
    "TRANSPOSE": (39, "1.6 1.14 1.15 2.3 2.4 2.12 2.14.4"),
    "MEAN": (40, "1.6 1.14 2.4"),
    "SUB": (41, "1.6 1.14 2.3 2.4 2.4"),
    "DIV": (42, "1.6 2.3"),
    "SQUEEZE": (43, "1.6 2.5"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (44, "1.13.1 1.14 2.3 2.12"),
    "STRIDED_SLICE": (45, "1.6 1.14 2.1 2.2 2.5 2.6 2.14 2.14"),
    "BIDIRECTIONAL_SEQUENCE_RNN": (46, "1.14 1.14 2.3"),
    "EXP": (47, "1.7 2.12"),
    "TOPK_V2": (48, "1.7 1.14 2.13"),
    "SPLIT": (49, "1.5 1.14 1.14 2.3"),
    "LOG_SOFTMAX": (50, "1.14 1.14"),
    "BIDIRECTIONAL_SEQUENCE_LSTM": (52, "1.14 1.14 1.14"),
    "CAST": (53, "1.5 2.7 2.8 2.9 2.12 2.15 2.17"),
    "PRELU": (54, "1.8"),
    "MAXIMUM": (55, "1.14 1.14 2.3 2.3"),
    "ARG_MAX": (56, "1.9 1.14 2.9"),
    "MINIMUM": (57, "1.14 1.14 2.3 2.3"),
    "LESS": (58, "1.14 1.14 2.13"),
    "NEG": (59, "1.9"),
    "PADV2": (60, "1.9 1.14 2.4 2.6"),
    "GREATER": (61, "1.14 1.14"),
    "GREATER_EQUAL": (62, "1.14 1.14 2.13"),
    "LESS_EQUAL": (63, "1.14 1.14"),
    "SELECT": (64, "1.14 1.14 2.12 2.12"),
    "SLICE": (65, "1.14 1.14 1.14 2.4 2.5 2.14"),
    "SIN": (66, "1.9"),
    "TRANSPOSE_CONV": (67, "1.9 2.2 2.3 2.13 2.15"),
    "SPARSE_TO_DENSE": (68, "1.9 1.14 1.15"),
    "TILE": (69, "1.10.1 2.2 2.8"),
    "EXPAND_DIMS": (70, "1.10"),
    "EQUAL": (71, "1.14 1.14 2.3 2.13"),
    "NOT_EQUAL": (72, "1.14 1.14 2.3"),
    "LOG": (73, "1.14 2.15"),
    "SUM": (74, "1.10 1.15"),
    "SQRT": (75, "1.10"),
    "RSQRT": (76, "1.10 2.5 2.15"),
    "SHAPE": (77, "1.10"),
    "POW": (78, "1.10"),
    "ARG_MIN": (79, "1.9 1.14 2.9"),
    "FAKE_QUANT": (80, "1.5 1.10"),
    "REDUCE_PROD": (81, "1.11 2.6"),
    "REDUCE_MAX": (82, "1.11 1.14 2.5"),
    "PACK": (83, "1.11 1.14 2.3 2.13"),
    "LOGICAL_OR": (84, "1.11"),
    "ONE_HOT": (85, "1.11"),
    "LOGICAL_AND": (86, "1.11"),
    "LOGICAL_NOT": (87, "1.11"),
    "UNPACK": (88, "1.11 1.14 2.2 2.3"),
    "REDUCE_MIN": (89, "1.11 1.14 2.5"),
    "FLOOR_DIV": (90, "1.14 1.14 2.13"),
    "REDUCE_ANY": (91, "1.11"),
    "SQUARE": (92, "1.12"),
    "ZEROS_LIKE": (93, "1.12"),
    "FILL": (94, "1.13 2.3 2.5 2.12"),
    "FLOOR_MOD": (95, "1.13 2.13"),
    "RANGE": (96, "1.13 2.14"),
    "RESIZE_NEAREST_NEIGHBOR": (97, "1.13.1 1.14 2.3 2.4"),
    "LEAKY_RELU": (98, "1.13.1 2.3"),
    "SQUARED_DIFFERENCE": (99, "1.13.1 2.5"),
    "MIRROR_PAD": (100, "1.13.1 2.3 2.12"),
    "ABS": (101, "1.13 2.4 2.5 2.6 2.12"),
    "SPLIT_V": (102, "1.13.1 2.3"),
    "UNIQUE": (103, "1.14"),
    "CEIL": (104, "1.14"),
    "REVERSE_V2": (105, "1.14 2.2 2.5"),
    "ADD_N": (106, "1.14"),
    "GATHER_ND": (107, "1.14 2.3 2.5 2.13 2.16"),
    "COS": (108, "1.14"),
    "WHERE": (109, "1.14 2.8"),
    "RANK": (110, "1.14"),
    "ELU": (111, "1.14"),
    "REVERSE_SEQUENCE": (112, "1.14"),
    "MATRIX_DIAG": (113, "1.14"),
    "QUANTIZE": (114, "1.14 1.15 2.7"),
    "MATRIX_SET_DIAG": (115, "1.14"),
    "ROUND": (116, "1.14"),
    "HARD_SWISH": (117, "1.15"),
    "IF": (118, "1.15"),
    "WHILE": (119, "1.15"),
    "NON_MAX_SUPPRESSION_V4": (120, "2.1"),
    "NON_MAX_SUPPRESSION_V5": (121, "2.1"),
    "SCATTER_ND": (122, "2.1"),
    "SELECT_V2": (123, "2.2 2.12"),
    "DENSIFY": (124, "2.2"),
    "SEGMENT_SUM": (125, "2.2"),
    "BATCH_MATMUL": (126, "2.3 2.3 2.4 2.5"),
    "CUMSUM": (128, "2.4"),
    "CALL_ONCE": (129, "2.5"),
    "BROADCAST_TO": (130, "- 2.5 2.5"),
    "RFFT2D": (131, "2.5"),
    "CONV_3D": (132, "2.5"),
    "IMAG": (133, "2.5"),
    "REAL": (134, "2.5"),
    "COMPLEX_ABS": (135, "2.5"),
    "HASHTABLE": (136, "2.5"),
    "HASHTABLE_FIND": (137, "2.5"),
    "HASHTABLE_IMPORT": (138, "2.5"),
    "HASHTABLE_SIZE": (139, "2.5"),
    "REDUCE_ALL": (140, "2.6"),
    "CONV_3D_TRANSPOSE": (141, "2.6"),
    "VAR_HANDLE": (142, "2.6"),
    "READ_VARIABLE": (143, "2.6"),
    "ASSIGN_VARIABLE": (144, "2.6"),
    "BROADCAST_ARGS": (145, "2.6"),
    "RANDOM_STANDARD_NORMAL": (146, "2.8"),
    "BUCKETIZE": (147, "2.8"),
    "RANDOM_UNIFORM": (148, "2.8"),
    "MULTINOMIAL": (149, "2.8"),
    "GELU": (150, "2.9 2.9"),
    "DYNAMIC_UPDATE_SLICE": (151, "2.9 2.17 2.19 2.20"),
    "RELU_0_TO_1": (152, "2.10"),
    "UNSORTED_SEGMENT_PROD": (153, "2.10"),
    "UNSORTED_SEGMENT_MAX": (154, "2.10"),
    "UNSORTED_SEGMENT_SUM": (155, "2.10"),
    "ATAN2": (156, "2.10"),
    "UNSORTED_SEGMENT_MIN": (157, "2.11"),
    "SIGN": (158, "2.11 2.12"),
    "BITCAST": (159, "2.13"),
    "BITWISE_XOR": (160, "2.13"),
    "RIGHT_SHIFT": (161, "2.13"),
    "STABLEHLO_ADD": (163, "2.16"),
    "STABLEHLO_MULTIPLY": (165, "2.16"),
    "STABLEHLO_MAXIMUM": (166, "2.16"),
    "STABLEHLO_AND": (176, "2.17"),
    "STABLEHLO_MINIMUM": (181, "2.16"),
    "STABLEHLO_SCATTER": (190, "2.15"),
    "STABLEHLO_PAD": (195, "2.16"),
    "STABLEHLO_REDUCE_WINDOW": (198, "2.16"),
    "STABLEHLO_GATHER": (201, "2.16"),
    "DILATE": (203, "2.15"),
    "STABLEHLO_RNG_BIT_GENERATOR": (204, "2.15"),
    "REDUCE_WINDOW": (205, "2.15"),
    "STABLEHLO_COMPOSITE": (206, "2.17"),
    "STABLEHLO_SHIFT_LEFT": (207, "2.17"),
    "STABLEHLO_CBRT": (208, "2.17"),
    "STABLEHLO_CASE": (209, "2.17"),
}

_NAMES = {code: name for name, (code, _) in RUNTIME_VERSIONS.items()} | {32: "CUSTOM"}
_CUSTOM = 32


def version_key(version: str) -> tuple[int, ...]:
    """'2.14' -> (2, 14, 0): runtime versions compared as numbers."""
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def _full(version: str) -> str:
    return ".".join(map(str, version_key(version)))


def runtime_for(op: str, version: int) -> str | None:
    """The first runtime that runs version ``version`` of builtin ``op``; None if the table does
    not know the pair (a newer operator version, a custom op)."""
    row = RUNTIME_VERSIONS.get(op)
    if row is None or not 1 <= version <= len(row[1].split()):
        return None
    first = row[1].split()[version - 1]
    return None if first == "-" else _full(first)


@dataclass(frozen=True)
class OpVersion:
    """One operator code of a file: which runtime its version needs and how many ops use it."""

    op: str
    version: int
    count: int
    min_runtime: str | None  # None: not in the table, no runtime known to run it

    def to_dict(self) -> dict:
        return {"op": self.op, "version": self.version, "count": self.count, "min_runtime": self.min_runtime}


def op_versions(model: str | os.PathLike | bytes | bytearray) -> list[OpVersion]:
    """Every operator code of a .tflite file (a path or its bytes), in the file's order.
    ValueError when the bytes are not a TFLite flatbuffer."""
    raw = bytes(model) if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
    try:
        codes, counts = _read_codes(raw)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"a damaged TFLite flatbuffer ({exc})") from None
    return [OpVersion(name, version, counts[i], None if name.startswith("CUSTOM:") else runtime_for(name, version))
            for i, (name, version) in enumerate(codes)]


def min_runtime(ops: list[OpVersion]) -> str | None:
    """The first runtime that has every operator version of ``ops``; None when one of them is
    not in the table (no known runtime is sure to load the file)."""
    if any(o.min_runtime is None for o in ops):
        return None
    return max((o.min_runtime for o in ops), key=version_key, default=_full("1.5"))


def too_new_for(ops: list[OpVersion], runtime: str) -> list[OpVersion]:
    """The operator codes that ``runtime`` (e.g. '2.14.0') cannot load."""
    limit = version_key(runtime)
    return [o for o in ops if o.min_runtime is None or version_key(o.min_runtime) > limit]


def _read_codes(raw: bytes) -> tuple[list[tuple[str, int]], Counter]:
    from .tflite_schema import Model

    if len(raw) < 8 or raw[4:8] != b"TFL3":
        raise ValueError("not a TFLite flatbuffer (no TFL3 identifier)")
    model = Model.GetRootAs(raw, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == _CUSTOM:
            name = "CUSTOM:" + (code.CustomCode() or b"?").decode("utf-8", "replace")
        else:
            name = _NAMES.get(builtin, f"BUILTIN_{builtin}")
        codes.append((name, code.Version()))
    counts: Counter = Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            counts[subgraph.Operators(o).OpcodeIndex()] += 1
    return codes, counts


def runtime_report(path: str | os.PathLike) -> dict:
    """For ``albert-edge inspect``: each operator code with the runtime it needs, the file's
    minimum runtime, and whether tflite-runtime 2.14 loads it."""
    ops = op_versions(path)
    return {
        "min_runtime": min_runtime(ops),
        "loads_in_tflite_runtime": {TFLITE_RUNTIME_LAST: not too_new_for(ops, TFLITE_RUNTIME_LAST)},
        "op_versions": [o.to_dict() for o in ops],
    }
