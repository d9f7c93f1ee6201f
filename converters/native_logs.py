"""Keeping the engines' own output off stderr while they import and export.

TensorFlow, ExecuTorch, torchao and MediaPipe write start-up and progress lines around the one
line a user needs: absl's "before InitializeLog" lines and CUDA probing (C++, straight to file
descriptor 2, whatever TF_CPP_MIN_LOG_LEVEL says for the first of them), ExecuTorch's cpuinfo
lines (C++ sent through pybind11 to Python's ``sys.stderr``), torchao's and torch's warnings
(Python logging and warnings). :func:`quiet_native` holds all of them back around a block: file
descriptor 2 and ``sys.stderr`` go to a temporary file, the libraries' loggers to ERROR, warnings
are ignored. What was held back is dropped when the block ends well or with an error of ours
(an :class:`albert_edge.errors.AlbertEdgeError`: its one line says what is wrong), and written
out when anything else ends it, since a bug report needs it.

Nothing is held back when albert-edge's logging is at INFO or below (``albert-edge -v``, or an
application that asked for albert_edge's info logs): then the libraries speak as they do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

from albert_edge.errors import AlbertEdgeError

__all__ = ["quiet_native", "verbose", "quiet_tensorflow_env", "TF_QUIET_LEVEL"]

log = logging.getLogger(__name__)

# The loggers of the libraries the exporters load, held at ERROR in a quiet block.
LIBRARY_LOGGERS = ("torch", "torchao", "executorch", "tensorflow", "absl", "h5py", "jax", "mediapipe")
TF_QUIET_LEVEL = "3"  # TF_CPP_MIN_LOG_LEVEL: fatal only
# The level as the process started with it: libraries set their own default when they load
# (jax, which MediaPipe's metadata writer imports, sets 1 where none is set), and that is not the
# user's choice. Read when this module is first imported, which may be after jax was: a 1 then is
# taken for jax's (a user who wants TensorFlow's lines gives -v, or 0).
_GIVEN_TF_LEVEL = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
if _GIVEN_TF_LEVEL == "1" and "jax" in sys.modules:
    _GIVEN_TF_LEVEL = None


def verbose() -> bool:
    """Whether the libraries' own output should show: albert_edge logs at INFO or below."""
    return logging.getLogger("albert_edge").isEnabledFor(logging.INFO)


def quiet_tensorflow_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """TensorFlow's C++ log level set to fatal only in ``env`` (default: this process's
    environment, where TensorFlow reads it when it is imported), unless albert-edge is verbose or
    the user set TF_CPP_MIN_LOG_LEVEL: a value given is never replaced. Returns ``env``."""
    env = os.environ if env is None else env
    if not verbose():
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_QUIET_LEVEL)
    return env


@contextlib.contextmanager
def quiet_native(tensorflow: bool = False) -> Iterator[None]:
    """Hold back what the libraries write while the block runs (see the module notes). Child
    processes started in the block inherit the held-back descriptor 2. ``tensorflow``: the block
    runs TensorFlow, so a TF_CPP_MIN_LOG_LEVEL the user set below fatal-only lets it speak."""
    level = (_GIVEN_TF_LEVEL or TF_QUIET_LEVEL).strip()
    if verbose() or (tensorflow and level.isdigit() and int(level) < int(TF_QUIET_LEVEL)):
        yield
        return
    with tempfile.TemporaryFile() as sink, _libraries_quiet():
        python_stderr = sys.stderr
        saved = _divert(sink)
        try:
            yield
        except BaseException as exc:
            held = _restore(saved, python_stderr, sink)
            if held.strip() and not isinstance(exc, (AlbertEdgeError, KeyboardInterrupt)):
                with contextlib.suppress(Exception):  # a bug: what the libraries said goes with it
                    python_stderr.write(held)
                    python_stderr.flush()
            elif held.strip():
                log.debug("library output held back:\n%s", held.rstrip())
            raise
        held = _restore(saved, python_stderr, sink)
        if held.strip():
            log.debug("library output held back:\n%s", held.rstrip())


def _divert(sink) -> int:
    """Descriptor 2 and ``sys.stderr`` into ``sink``; returns a copy of the old descriptor 2."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    # the same open file as descriptor 2: one offset, so both keep their order in the sink
    sys.stderr = open(sink.fileno(), "w", buffering=1, encoding="utf-8", errors="replace",  # noqa: SIM115
                      closefd=False)
    return saved


def _restore(saved: int, python_stderr, sink) -> str:
    """Descriptor 2 and ``sys.stderr`` as they were; returns what ``sink`` holds."""
    diverted, sys.stderr = sys.stderr, python_stderr
    with contextlib.suppress(Exception):
        diverted.close()  # flushed; the sink's descriptor stays open (closefd=False)
    os.dup2(saved, 2)
    os.close(saved)
    sink.seek(0)
    return sink.read().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _libraries_quiet() -> Iterator[None]:
    """The libraries' loggers at ERROR and warnings ignored, for the block."""
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            if logger.getEffectiveLevel() < logging.ERROR:
                logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
