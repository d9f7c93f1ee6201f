"""Writing files so that a reader never sees half of one, and no command replaces what a user
has without being told to. Standard library only (device side).

- :func:`staged`: the one way to write an output, a file or a whole directory::

      with staged(out) as tmp:                  # a file: tmp is a name beside out, not created
          write(tmp)
      with staged(out, directory=True) as tmp:  # a directory: tmp is an empty directory beside out
          write_into(tmp)

  The block writes under a temporary name in ``out``'s own directory; when it ends normally the
  result is checked (``verify``) and put in place of ``out`` in one step (:func:`install`). When
  it raises (a full disk, Ctrl-C, SIGTERM, a failed check), the temporary name and any parent
  directory made for it are removed and ``out`` is as it was.
- :func:`atomic_write`: one file from bytes, text or a writer function, through :func:`staged`.
- :func:`staged_dir`: a whole output directory through :func:`staged` (``directory=True``).
- :func:`install`: new files or directories put in place of old ones as one step: after an
  interrupt at any point, every destination holds either its old version or its new one, never a
  mix of the two. :func:`staged` goes through it; so does a command that puts several outputs in
  place together.
- :func:`check_new_file` / :func:`check_output_dir` / :func:`check_not_input`: the one place for
  the ``--force`` rules, called before any work is done. The first two refuse an output that
  exists (unless ``force``), is of the wrong kind, or lies under a file; :func:`check_not_input`
  refuses, with or without ``force``, an output that is, holds or lies inside something the
  command reads (``--force`` replaces our earlier output, never an input). :func:`staged` itself
  replaces whatever is at ``out``: a writer checks first.
- :func:`interrupt_note`: what a command stopped by Ctrl-C or SIGTERM left behind: the outputs put
  in place before the interrupt, named as complete (an interrupt that lands just after an install
  finds them whole), and nothing half-written.

A full disk is told as a full disk whoever was writing: Python's own OSError, a library that says
so in its own words, or an engine (onnxruntime's .ort serializer) that only says it failed to save
the temporary file it was given; the free space is looked at before the temporaries are removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .errors import AlbertEdgeError, OutputError, user_message

__all__ = ["staged", "staged_files", "atomic_write", "cache_root", "check_new_file", "check_output_dir",
           "check_not_input", "interrupt_note", "staged_dir", "install", "link_or_copy", "missing_root",
           "STAGING_MARK"]

# Temporary names carry this mark, so a test (or a person) can tell leftovers from outputs.
STAGING_MARK = ".albert-edge-tmp"
# Free space below this after a failed write: the disk is full (what is left is file-system slack).
_NEARLY_FULL = 64 * 1024
# How libraries other than Python's own say that the disk is full.
_FULL_SIGNS = ("No space left", "StorageFull", "os error 28", "ENOSPC", "Disk quota exceeded")
# How an engine says it failed to write a file it was given (onnxruntime: "Failed to save ORT format
# model to file: ..."), with no reason: then the free space decides.
_SAVING = re.compile(r"\b(save|saving|write|writing|written|serializ\w*|flush\w*)\b", re.IGNORECASE)
# Each output this process began to put in place, with the mark (device, inode) of its new version
# (interrupt_note): complete wherever an interrupt landed if the mark is what is there, found by
# looking as _put_back finds it. Never an output inside a staging directory or under cache_root().
_placing: list[tuple[Path, tuple[int, int]]] = []


def cache_root() -> Path:
    """Where albert-edge keeps what it can make again: ``$XDG_CACHE_HOME/albert-edge`` (default
    ``~/.cache/albert-edge``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "albert-edge"


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[str], object]) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`staged`). ``data`` is bytes, text (UTF-8), or a
    function that writes the file at the temporary path it is given (for writers that want a file
    name). The file gets the usual permissions (0666 less the umask)."""
    with staged(path) as tmp:
        if callable(data):
            data(str(tmp))
        else:
            tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def missing_root(path: str | os.PathLike) -> Path | None:
    """The outermost directory of ``path`` (itself included) that does not exist yet: what to
    remove to undo creating ``path`` with its parents. None when ``path`` exists."""
    path = Path(path)
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path


def _write_failure(exc: BaseException, directory: str | os.PathLike,
                  staged: Sequence[str | os.PathLike] = ()) -> str | None:
    """What to tell the user when writing failed for a reason of theirs (a full disk, a
    read-only file system); None for anything else. Writers other than Python's own (torch,
    safetensors) report a full disk in their own words, so the free space is looked at too.
    ``staged`` are the temporaries the failed block wrote, still there: an engine that says only
    that it failed to save one of them (onnxruntime's .ort serializer) wrote on a full disk when
    the disk now has less room than they hold: the engine's own scratch files, removed as its
    error unwound, are all that was freed since."""
    if isinstance(exc, OutputError) or not isinstance(exc, Exception):
        return None
    reason = user_message(exc) if isinstance(exc, OSError) else None
    if reason is None and _disk_full(exc, Path(directory), [Path(p) for p in staged]):
        reason = user_message(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    return reason


def _disk_full(exc: Exception, directory: Path, staged: Sequence[Path] = ()) -> bool:
    text = str(exc)
    if any(sign in text for sign in _FULL_SIGNS):
        return True
    free = _free_bytes(directory)
    if free is None:
        return False
    if free < _NEARLY_FULL:
        return True
    named = any(str(p) in text or p.name in text for p in staged)
    return named and _SAVING.search(text) is not None and free < sum(map(_bytes_held, staged)) + _NEARLY_FULL


def _free_bytes(directory: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``directory``'s file system."""
    try:
        root = missing_root(directory)
        stats = os.statvfs(directory if root is None else root.parent)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _bytes_held(path: Path) -> int:
    """The bytes a temporary file or directory holds (0 when it is not there)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return os.lstat(path).st_size
        return sum(os.lstat(os.path.join(top, name)).st_size for top, _, names in os.walk(path) for name in names)
    except OSError:
        return 0


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
def staged(out: str | os.PathLike, *, directory: bool = False, keep: bool = True,
           verify: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Write ``out`` under a temporary name beside it and put it in place when the block ends.

    Yields, in ``out``'s own directory (made if missing, so on its file system), a name carrying
    :data:`STAGING_MARK`: for a file, a path not yet created that ends in ``out``'s suffixes
    (``.model.tflite.<random>.albert-edge-tmp.tflite``: some writers pick the format by them);
    with ``directory``, an empty directory to write the whole output into.

    When the block ends normally: with ``directory`` and ``keep``, what ``out`` held that was not
    written again is carried over (hard links, no copies); ``verify(tmp)`` is called if given; the
    new file or directory gets the usual permissions (0666 or 0777 less the umask) and takes
    ``out``'s place in one step (:func:`install`).

    When it raises (an interrupt or ``verify`` too), the temporary file or directory and any parent
    directory made for it are removed and ``out`` is as it was. A full disk or a read-only file
    system becomes one OutputError ("cannot write OUT: the disk is full: ... (OUT was left as it
    was)"), whoever was writing (:func:`_write_failure`); an error raised inside names ``out``, not
    the temporary name. Once ``out`` is in place it stays: an interrupt that lands after that
    (while the old version is removed, or later in the command) finds it complete, and
    :func:`interrupt_note` says so."""
    out = Path(out)

    def finish(tmp: Path) -> None:
        if not directory and not os.path.lexists(tmp):
            raise RuntimeError(f"the writer of {out} wrote nothing at {tmp}")
        if directory and keep and out.is_dir():
            for item in out.iterdir():
                if STAGING_MARK not in item.name and not os.path.lexists(tmp / item.name):
                    link_or_copy(item, tmp / item.name)
        if verify is not None:
            verify(tmp)

    with _staging([out], directory, finish) as (tmp,):
        yield tmp


def staged_files(outs: Sequence[str | os.PathLike]) -> contextlib.AbstractContextManager[list[Path]]:
    """Several files that go in place together or not at all (a quantized file, its .ort twin and
    the manifest that lists both): yields a temporary name beside each (not created; in its file's
    directory, ending in its suffixes). When the block ends normally, every temporary that was
    written takes its file's place, all as one step (:func:`install`); a file whose temporary was
    not written stays as it was (write none to leave everything as it was). When it raises (an
    interrupt too), every temporary is removed and every file is as it was; a full disk becomes one
    OutputError naming the file being written (the first, when that cannot be told), as
    :func:`staged` says. Once in place the files stay: an interrupt after that finds them complete
    (:func:`interrupt_note`)."""
    return _staging([Path(o) for o in outs], False, None)


@contextlib.contextmanager
def _staging(outs: list[Path], directory: bool, finish: Callable[[Path], None] | None) -> Iterator[list[Path]]:
    """What :func:`staged` and :func:`staged_files` share: temporaries beside ``outs`` (directories
    with ``directory``), ``finish`` run on each when the block ends normally, then those written
    put in place together; on a raise, everything made removed and one error naming the outputs."""
    made = missing_root(outs[0].parent)
    try:
        for out in outs:
            _recover(out)
        outs[0].parent.mkdir(parents=True, exist_ok=True)
        tmps = [Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=STAGING_MARK, dir=out.parent)) if directory
                else _temporary_name(out) for out in outs]
    except BaseException as exc:
        parent = outs[0].parent
        what = (f"cannot create {parent}: " if not parent.is_dir()
                else f"cannot create a temporary directory in {parent}: " if directory else "")
        _remove(made)
        _raise_named(exc, [(None, outs[0])], _write_failure(exc, parent), what)
    pairs = list(zip(tmps, outs))
    placed: list = []
    try:
        yield tmps
        for tmp in tmps:
            if finish is not None:
                finish(tmp)
            if os.path.lexists(tmp):
                os.chmod(tmp, (0o777 if tmp.is_dir() else 0o666) & ~_umask())
        placed = _put_in_place([(t, o) for t, o in pairs if os.path.lexists(t)])
    except BaseException as exc:
        reason = _write_failure(exc, outs[0].parent, tmps)  # before the temporaries' bytes are freed
        for tmp in tmps:
            _remove(tmp)
        _remove(made)
        _raise_named(exc, pairs, reason)
    finally:  # in place: the old versions go, even when an interrupt lands now
        _drop_old(placed)
    for tmp in tmps:  # the old versions were removed; this is only in case
        if os.path.lexists(tmp):
            _remove(tmp)


def _temporary_name(out: Path) -> Path:
    """A name beside ``out`` that no one uses, ending in ``out``'s suffixes (within NAME_MAX)."""
    tail = f".{os.getpid()}-{secrets.token_hex(4)}{STAGING_MARK}{''.join(out.suffixes)}"
    return out.with_name(f".{out.name[:max(8, 250 - len(tail))]}{tail}")


def _raise_named(exc: BaseException, staged: Sequence[tuple[Path | None, Path]], reason: str | None,
                 what: str = "") -> None:
    """Raise what :func:`staged` raises for ``exc`` (the exception being handled) while it wrote the
    (temporary, output) pairs ``staged``: one OutputError naming the output for an error the user
    can fix (``reason``, from :func:`_write_failure`), ``exc`` itself for anything else (an
    interrupt, a bug), an error of ours naming outputs instead of temporary names. The output named
    is the one whose temporary the error names, else the first. An output inside another one's
    staging directory (a file a staged directory's writer stages) leaves "was left as it was" to the
    outer one, which names the final path."""
    text = str(exc)
    named = _named(text, staged)
    out = next((o for t, o in staged if t is not None and (str(t) in text or t.name in text)), staged[0][1])
    outs = [o for _, o in staged if not any(STAGING_MARK in part for part in o.parent.parts)]
    left = "" if not outs else f" ({outs[0]} was left as it was)" if len(outs) == 1 else \
        f" ({', '.join(map(str, outs[:-1]))} and {outs[-1]} were left as they were)"
    if isinstance(exc, OutputError):
        raise OutputError(named if named.endswith((" was left as it was)", " were left as they were)"))
                          else named + left) from exc
    if reason is not None:
        raise OutputError(f"cannot write {out}: {what}{_named(reason, staged)}{left}") from exc
    if isinstance(exc, AlbertEdgeError) and named != text:
        try:
            renamed = type(exc)(named)
        except TypeError:  # an error class with other arguments: raised as it is
            raise exc from None
        raise renamed from exc
    raise exc


def _named(text: str, staged: Sequence[tuple[Path | None, Path]]) -> str:
    """``text`` naming each output where it named the output's temporary. A path inside a staged
    directory keeps its part below it (``OUT/model.onnx``) unless that part goes through a hidden
    name (a writer's own scratch directory or temporary file): then it is the output's path only."""
    for tmp, out in staged:
        if tmp is not None:
            text = re.sub(re.escape(str(tmp)) + r"((?:/[^/\s'\",:;()]+)*)",
                          lambda m, out=out: str(out) + ("" if "/." in m.group(1) else m.group(1)), text)
            text = text.replace(tmp.name, out.name)
    return text


def _placing_now(pairs: Sequence[tuple[Path, Path]], marks: Sequence[tuple[int, int]]) -> None:
    """Note the outputs about to be put in place with their new versions' marks (:func:`interrupt_note`);
    outputs inside a staging directory (the outer output is what counts) and cache entries are not
    the user's outputs."""
    cache = cache_root()
    for (_, dst), mark in zip(pairs, marks):
        if not any(STAGING_MARK in part for part in dst.parts) and cache not in Path(os.path.abspath(dst)).parents:
            _placing.append((dst, mark))


def _completed_outputs() -> list[Path]:
    """The outputs this process has put in place (once each, in order) whose new version is there
    now: looked at, so an interrupt at any step of :func:`install` is told right."""
    done: dict[Path, None] = {}
    for dst, mark in _placing:
        with contextlib.suppress(OSError):
            if os.path.lexists(dst) and _mark(dst) == mark:
                done[dst] = None
    return list(done)


def interrupt_note() -> str:
    """What a command stopped by Ctrl-C or SIGTERM left behind, for its one line: the outputs put
    in place before the interrupt, each complete (an interrupt that lands just after an install
    finds them whole), and nothing half-written (every output being written was left as it was)."""
    done = _completed_outputs()
    nothing = "nothing half-written was left behind"
    if not done:
        return nothing
    if len(done) > 4:  # the last ones are those the interrupt came just after
        last = ", ".join(map(str, done[-4:]))
        return f"{len(done)} outputs are complete (written before the interrupt), the last {last}; {nothing}"
    verb = "is" if len(done) == 1 else "are"
    return f"{', '.join(map(str, done))} {verb} complete (written before the interrupt); {nothing}"


def staged_dir(out: str | os.PathLike, keep: bool = True) -> contextlib.AbstractContextManager[Path]:
    """Yield an empty temporary directory beside ``out`` to write the whole output into; it takes
    ``out``'s place when the block ends normally (:func:`staged` with ``directory=True``). With
    ``keep``, what ``out`` held that was not written again is carried over (hard links, no copies).
    When it raises (an interrupt too), the temporary directory and any parent directory made for it
    are removed and ``out`` is as it was."""
    return staged(out, directory=True, keep=keep)


def install(moves: Sequence[tuple[str | os.PathLike, str | os.PathLike]]) -> None:
    """Put each new file or directory (first of a pair) in place of its destination (second), all
    as one step. When this returns, every destination holds its new version and the old versions
    are gone; when it raises before every new version is in place (an interrupt included, at any
    point), every destination holds what it held before and the new versions are where they were.
    An interrupt while the old versions are removed leaves the new ones in place, whole, and the
    old ones removed. Each new path must be on the destination's file system.

    Where the kernel swaps two names at once (Linux renameat2 with RENAME_EXCHANGE), a destination
    never goes missing, even for a process killed outright; elsewhere the old version is renamed
    aside first, and a destination killed in that instant is restored by the next write to it."""
    _drop_old(_put_in_place(moves))


_Placed = tuple[Path, Path, tuple[int, int], Path]  # new, destination, the new one's mark, aside


def _put_in_place(moves: Sequence[tuple[str | os.PathLike, str | os.PathLike]]) -> list[_Placed]:
    """The renames of :func:`install`, undone when they raise; returns what :func:`_drop_old` removes."""
    pairs = [(Path(new), Path(dst)) for new, dst in moves]
    marks = [_mark(new) for new, _ in pairs]
    asides = [dst.with_name(f".{dst.name}.{os.getpid()}-{i}.old{STAGING_MARK}") for i, (_, dst) in enumerate(pairs)]
    _placing_now(pairs, marks)
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
    return [(new, dst, mark, aside) for (new, dst), mark, aside in zip(pairs, marks, asides)]


def _drop_old(placed: Sequence[_Placed]) -> None:
    """Remove the old versions :func:`_put_in_place` left (after a swap, at the new one's name; else
    aside). An interrupt while doing so finishes the removal before it goes on: the new versions
    are in place, and no old one is left behind as a leftover."""
    try:
        for new, _, mark, aside in placed:
            for old in (new, aside):
                if os.path.lexists(old) and _mark(old) != mark:
                    _remove(old)
    except BaseException:
        for new, _, mark, aside in placed:
            for old in (new, aside):
                with contextlib.suppress(OSError):
                    if os.path.lexists(old) and _mark(old) != mark:
                        _remove(old)
        raise


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


def _remove(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``src`` (a file, a symlink or a directory) again at ``dst`` without copying its bytes (hard
    links), copied where it cannot be linked."""
    src, dst = Path(src), Path(dst)

    def one(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=one)
    elif src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        one(src, dst)


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
