"""Starting a Python child of albert-edge (the profiler's measurements, the tokenizer trainer, the
TFLite converter): the same interpreter, importing the same albert_edge as the parent.

``python -c`` and ``python -m`` put the working directory first on ``sys.path``; run from a
checkout, its ``albert_edge/`` folder would shadow the installed package (and lacks
``albert_edge.converters``, which is installed from another folder). Standard library only.
"""

from __future__ import annotations

import os
import sys

__all__ = ["python", "child_env"]


def python(*args: str) -> list[str]:
    """The command line of a child running this interpreter with ``args``."""
    return [sys.executable, *args]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a Python child: its ``sys.path`` as PYTHONPATH (the same
    albert_edge, wherever it was imported from) and PYTHONSAFEPATH=1 (Python 3.11+: the working
    directory is not put first); ``extra`` on top, where not already set."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {**extra, **os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
