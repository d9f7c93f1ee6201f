"""The exceptions albert-edge raises for bad input. The CLI turns each into one line and exit 2."""

from __future__ import annotations


class AlbertEdgeError(Exception):
    """Base of every error caused by what the user gave us (not by a bug)."""


class ConfigError(AlbertEdgeError, ValueError):
    """A configuration is invalid or cannot be read; the message shows the values."""


class CheckpointError(AlbertEdgeError):
    """A checkpoint is missing, corrupt, or does not match its config."""


class ConversionError(AlbertEdgeError):
    """An export could not be made, or made a file that failed verification."""


class TokenizerError(AlbertEdgeError):
    """A tokenizer model is missing, unreadable or does not match the model."""


class RuntimeUnavailable(AlbertEdgeError):
    """No interpreter is installed for a model file's format."""
