"""Errors of the training pipeline: bad data and runs that cannot go on. The CLI shows each as one
line and exits with code 2."""

from __future__ import annotations

from ..errors import AlbertEdgeError, DataError

__all__ = ["DataError", "TrainingError"]


class TrainingError(AlbertEdgeError):
    """A run cannot continue: the loss is no longer finite, or a resume does not match the run."""
