"""The text of a quantization, shaped for a static-shape file (convert --static: inputs
``[1, N]``): each row of each batch on its own, padded to N. The attention mask is 0 on the
padding, so the file's outputs for the real tokens are what an unpadded run gives, and
:func:`.accuracy.measure` leaves padded positions out of every figure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .calibration import Batch, Prepared

__all__ = ["static_rows", "for_static"]


def static_rows(batches: Sequence[Batch], length: int) -> list[Batch]:
    """Every row of ``batches`` as a batch of one, padded to ``length`` tokens."""
    rows = []
    for batch in batches:
        T = batch.feeds["input_ids"].shape[1]
        if T > length:
            raise ValueError(f"a batch of {T} tokens does not fit a static file of {length}")
        pad = ((0, 0), (0, length - T))
        for i in range(batch.feeds["input_ids"].shape[0]):
            feeds = {name: np.pad(value[i:i + 1], pad) for name, value in batch.feeds.items()}
            masked = None if batch.masked is None else np.pad(batch.masked[i:i + 1], pad)
            rows.append(Batch(feeds, masked, batch.source))
    return rows


def for_static(prepared: Prepared, length: int) -> Prepared:
    """``prepared`` with its calibration and evaluation batches as :func:`static_rows`."""
    return Prepared(static_rows(prepared.calibration, length), static_rows(prepared.evaluation, length),
                    {**prepared.described, "static_len": length})
