"""ExecuTorch .pte files of a tiny ALBERT, made once per test run (skipped where executorch's
exporter or torch is missing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class PteFiles:
    model: object  # the PyTorch module exported: (input_ids, attention_mask, token_type_ids) -> hidden
    xnnpack: Path  # lowered to XNNPACK, as `convert --to executorch` writes it
    portable: Path  # not delegated: ExecuTorch's portable kernels only
    max_seq_len: int


@pytest.fixture(scope="session")
def pte_files(tmp_path_factory) -> PteFiles:
    pytest.importorskip("torch")
    pytest.importorskip("executorch.exir")
    pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    from ..pte_fixtures import export_pte, tiny_pte_model

    out = tmp_path_factory.mktemp("pte")
    model = tiny_pte_model()
    return PteFiles(model, export_pte(model, out / "tiny.pte"), export_pte(model, out / "tiny_portable.pte",
                                                                        xnnpack=False), 64)


@pytest.fixture(scope="session")
def pte_int8(tmp_path_factory, pte_files) -> Path:
    """The same model, linear weights int8 (XNNPACK's dynamic per-channel scheme)."""
    pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
    from ..pte_fixtures import export_pte

    return export_pte(pte_files.model, tmp_path_factory.mktemp("pte-int8") / "tiny_int8.pte", int8=True)
