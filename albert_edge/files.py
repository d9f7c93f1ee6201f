"""Writing files so that a reader never sees half of one, and no command replaces what a user
has without being told to. Standard library only (device side).

- :func:`atomic_write`: one file, through a temporary name in the same directory.
- :func:`check_new_file` / :func:`check_output_dir`: refuse an output that exists (unless
  ``force``), is of the wrong kind, or lies under a file, before any work is done;
  :func:`check_not_input`: refuse, with or without ``force``, an output that is, holds or lies
  inside something the command reads (``--force`` replaces our earlier output, never an input).
- :func:`staged_dir`: a whole output directory assembled under a temporary name and put in
  place at the end with :func:`install`, so a failure (a full disk, an interrupt) leaves the old
  output as it was.
- :func:`install`: new files or directories put in place of old ones as one step: after an
  interrupt at any point, every destination holds either its old version or its new one, never a
  mix of the two. Every command that writes an output goes through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .errors import OutputError, user_message

__all__ = ["atomic_write", "cache_root", "check_new_file", "check_output_dir", "check_not_input", "staged_dir", "install",
           "write_failure", "missing_root", "STAGING_MARK"]

# Temporary names carry this mark, so a test (or a person) can tell leftovers from outputs.
STAGING_MARK = ".albert-edge-tmp"


def cache_root() -> Path:
    """Where albert-edge keeps what it can make again: ``$XDG_CACHE_HOME/albert-edge`` (default
    ``~/.cache/albert-edge``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "albert-edge"


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


def check_not_input(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None],
                    option: str = "--out") -> Path:
    """Refuse an output that is one of ``inputs``, holds one, or lies inside one (compared after
    symlinks and ``..`` are resolved): writing it, with ``--force`` or not, would delete what the
    command reads. Inputs that are not paths (``builtin``, a model id) are passed over; a TensorFlow
    checkpoint prefix stands for the files that start with it."""
    out = Path(out)
    where = out.resolve()
    for given in inputs:
        if given is None:
            continue
        for path in _input_paths(Path(given)):
            found = path.resolve()
            if where == found:
                why = "is"
            elif where in found.parents:
                why = "holds"
            elif found in where.parents:
                why = "lies inside"
            else:
                continue
            raise OutputError(f"{option} {out} {why} the input {given}: writing there would delete what the command "
                              "reads, --force or not; choose another path")
    return out


def _input_paths(path: Path) -> list[Path]:
    if path.exists():
        return [path]
    return sorted(path.parent.glob(glob.escape(path.name) + ".*")) if path.name and path.parent.is_dir() else []


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, keep: bool = True) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``out`` to write the whole output into. When the
    block ends normally, ``out`` becomes it in one step (:func:`install`); with ``keep``, what
    ``out`` held that was not written again is carried over (hard links, no copies). When it
    raises (an interrupt too), the temporary directory and any parent directory made for it are
    removed and ``out`` is as it was."""
    out = Path(out)
    _recover(out)
    made = missing_root(out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=STAGING_MARK, dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if keep and out.is_dir():
            for item in out.iterdir():
                if STAGING_MARK not in item.name and not os.path.lexists(tmp / item.name):
                    _link(item, tmp / item.name)
        install([(tmp, out)])
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


def install(moves: Sequence[tuple[str | os.PathLike, str | os.PathLike]]) -> None:
    """Put each new file or directory (first of a pair) in place of its destination (second), all
    as one step. When this returns, every destination holds its new version and the old versions
    are gone; when it raises (an interrupt included, at any point), every destination holds what
    it held before and the new versions are where they were. Old versions are removed only once
    all new ones are in place. Each new path must be on the destination's file system.

    Where the kernel swaps two names at once (Linux renameat2 with RENAME_EXCHANGE), a destination
    never goes missing, even for a process killed outright; elsewhere the old version is renamed
    aside first, and a destination killed in that instant is restored by the next write to it."""
    pairs = [(Path(new), Path(dst)) for new, dst in moves]
    marks = [_mark(new) for new, _ in pairs]
    asides = [dst.with_name(f".{dst.name}.{os.getpid()}-{i}.old{STAGING_MARK}") for i, (_, dst) in enumerate(pairs)]
    try:
        for (new, dst), aside in zip(pairs, asides):
            if not os.path.lexists(dst):
                os.rename(new, dst)
            elif not _exchange(new, dst):
                os.rename(dst, aside)
                os.rename(new, dst)
    except BaseException:
        for (new, dst), mark, aside in reversed(list(zip(pairs, marks, asides))):
            _put_back(new, dst, mark, aside)
        raise
    for (new, dst), mark, aside in zip(pairs, marks, asides):
        for old in (new, aside):  # after a swap the old version is at the new one's name
            if os.path.lexists(old) and _mark(old) != mark:
                _remove(old)


def _put_back(new: Path, dst: Path, mark: tuple[int, int], aside: Path) -> None:
    """Undo one destination of :func:`install`, whatever step the interrupt came at: found by
    looking, not by remembering (an interrupt can land between a rename and its bookkeeping)."""
    if os.path.lexists(dst) and _mark(dst) == mark:  # the new version is in place
        old = next((p for p in (new, aside) if os.path.lexists(p)), None)
        if old is None:  # there was nothing before
            os.rename(dst, new)
        elif old == new:  # swapped: swap back
            if not _exchange(new, dst):
                raise OSError(f"cannot swap {dst} back")
        else:
            os.rename(dst, new)
            os.rename(aside, dst)
    elif not os.path.lexists(dst) and os.path.lexists(aside):  # moved aside, the new one not yet in
        os.rename(aside, dst)


def _recover(dst: Path) -> None:
    """Put back an old version that a process killed inside :func:`install` left aside."""
    if os.path.lexists(dst) or not dst.parent.is_dir():
        return
    left = sorted(dst.parent.glob(f".{glob.escape(dst.name)}.*.old{STAGING_MARK}"), key=os.path.getmtime)
    if left:
        os.rename(left[-1], dst)


def _mark(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _link(src: Path, dst: Path) -> None:
    """``src`` again at ``dst`` without copying its bytes (hard links), copied where it cannot be linked."""
    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    elif src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        link_or_copy(src, dst)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 (macOS, musl before 1.2.2)
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing names at once; False where the system or file system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))
