"""Writing files so that a reader never sees half of one: write to a temporary name in the same
directory, then rename into place. Standard library only (device side)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], object]) -> Path:
    """Write ``data`` to ``path`` atomically. ``data`` is bytes, text (UTF-8), or a function that
    writes the file at the temporary path it is given (for writers that want a file name).
    The file gets the usual permissions (0666 less the umask), not mkstemp's private 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if callable(data):
            os.close(fd)
            data(tmp)
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
