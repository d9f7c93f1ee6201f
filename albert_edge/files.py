"""Writing files so that a reader never sees half of one, and no command replaces what a user
has without being told to. Standard library only (device side).

- :func:`atomic_write`: one file, through a temporary name in the same directory.
- :func:`check_new_file` / :func:`check_output_dir`: refuse an output that exists (unless
  ``force``), is of the wrong kind, or lies under a file, before any work is done.
- :func:`staged_dir`: a whole output directory assembled under a temporary name and moved in
  place at the end, so a failure (a full disk, an interrupt) leaves the old output as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import OutputError, user_message

__all__ = ["atomic_write", "check_new_file", "check_output_dir", "staged_dir", "write_failure", "missing_root",
           "STAGING_MARK"]

# Temporary names carry this mark, so a test (or a person) can tell leftovers from outputs.
STAGING_MARK = ".albert-edge-tmp"


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], object]) -> Path:
    """Write ``data`` to ``path`` atomically. ``data`` is bytes, text (UTF-8), or a function that
    writes the file at the temporary path it is given (for writers that want a file name).
    The file gets the usual permissions (0666 less the umask), not mkstemp's private 0600."""
    path = Path(path)
    made = missing_root(path.parent)
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
    except BaseException as exc:
        reason = write_failure(exc, path.parent)
        Path(tmp).unlink(missing_ok=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if reason is None:
            raise
        raise OutputError(f"cannot write {path}: {reason}") from exc
    return path


def missing_root(path: str | os.PathLike) -> Path | None:
    """The outermost directory of ``path`` (itself included) that does not exist yet: what to
    remove to undo creating ``path`` with its parents. None when ``path`` exists."""
    path = Path(path)
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path


def write_failure(exc: BaseException, directory: str | os.PathLike) -> str | None:
    """What to tell the user when writing failed for a reason of theirs (a full disk, a
    read-only file system); None for anything else. Writers other than Python's own (torch,
    safetensors) report a full disk in their own words, so the free space is looked at too."""
    if isinstance(exc, OutputError) or not isinstance(exc, Exception):
        return None
    reason = user_message(exc) if isinstance(exc, OSError) else None
    if reason is None and _disk_full(exc, directory):
        reason = user_message(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    return reason


def _disk_full(exc: Exception, directory: Path) -> bool:
    text = str(exc)
    if "No space left" in text or "StorageFull" in text or "os error 28" in text:
        return True
    try:
        root = missing_root(directory)
        stats = os.statvfs(Path(directory) if root is None else root.parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 64 * 1024


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_parent(path: Path, option: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{option} {path}: {parent} is a file, not a directory; choose another path")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputError(f"{option} {path}: directory {parent} is not writable; choose another path")
            return


def check_new_file(path: str | os.PathLike, force: bool, option: str = "--out") -> Path:
    """Refuse to write the file ``path`` when it exists (unless ``force``), is a directory, or
    cannot be created."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path} is a directory; give a file name")
    if path.exists() and not force:
        raise OutputError(f"{option} {path} already exists; pass --force to replace it")
    _check_parent(path, option)
    return path


def check_output_dir(path: str | os.PathLike, force: bool, option: str = "--out",
                     what: str = "files") -> Path:
    """Refuse an output directory that is a file, lies under a file, cannot be written, or
    already holds something (unless ``force``)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path} is a file, not a directory; choose another path")
    if path.is_dir():
        held = sorted(p.name for p in path.iterdir() if STAGING_MARK not in p.name)
        if held and not force:
            shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
            raise OutputError(f"{option} {path} already holds {what} ({shown}); pass --force to replace them "
                              "or choose another directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {path} is not writable; choose another directory")
    else:
        _check_parent(path, option)
    return path


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``out`` to write the whole output into. When the
    block ends normally, ``out`` becomes it: by one rename when ``out`` does not exist, else
    file by file (the files ``out`` holds that were not written again are kept). When it
    raises (an interrupt too), the temporary directory and any parent directory made for it
    are removed and ``out`` is as it was."""
    out = Path(out)
    made = missing_root(out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=STAGING_MARK, dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if not out.exists():
            os.replace(tmp, out)
        else:
            for item in sorted(tmp.iterdir()):
                target = out / item.name
                if target.is_dir() and not item.is_dir():
                    shutil.rmtree(target)
                os.replace(item, target)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if isinstance(exc, OutputError):  # name the output the user asked for, not our temporary name
            raise OutputError(f"{str(exc).replace(str(tmp), str(out))} ({out} was left as it was)") from exc
        reason = write_failure(exc, out.parent)
        if reason is None:
            raise
        raise OutputError(f"cannot write {out}: {reason} ({out} was left as it was)") from exc
    shutil.rmtree(tmp, ignore_errors=True)
