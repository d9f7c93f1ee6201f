"""One way to put an output in place (albert_edge.files.staged, and install under it): interrupted
at any step, every destination holds either its old version or its new one, never a mix, and
nothing of ours is left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from albert_edge import files
from albert_edge.errors import OutputError
from albert_edge.files import STAGING_MARK, atomic_write, install, staged, staged_dir


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its text (a file ``root`` itself as '.')."""
    if root.is_file():
        return {".": root.read_text()}
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _outputs(tmp_path: Path) -> tuple[list[tuple[Path, Path]], dict, dict]:
    """Three destinations: a directory, a file, and a name that does not exist yet; and the new
    versions of each, staged beside them."""
    (tmp_path / "out").mkdir(parents=True)
    (tmp_path / "out" / "a.txt").write_text("old a")
    (tmp_path / "out" / "sub").mkdir()
    (tmp_path / "out" / "sub" / "b.txt").write_text("old b")
    (tmp_path / "manifest.json").write_text("old manifest")
    (tmp_path / "new-out").mkdir()
    (tmp_path / "new-out" / "a.txt").write_text("new a")
    (tmp_path / "new-manifest").write_text("new manifest")
    (tmp_path / "new-extra").write_text("new extra")
    pairs = [(tmp_path / "new-out", tmp_path / "out"), (tmp_path / "new-manifest", tmp_path / "manifest.json"),
             (tmp_path / "new-extra", tmp_path / "extra.txt")]
    old = {dst.name: _tree(dst) if dst.exists() else None for _, dst in pairs}
    new = {dst.name: _tree(src) for src, dst in pairs}
    return pairs, old, new


class _Interrupt:
    """Raise KeyboardInterrupt at the n-th rename or swap, before or just after doing it (a
    signal can land on either side of a system call)."""

    def __init__(self, monkeypatch, at: int, after: bool):
        self.at, self.after, self.calls = at, after, 0
        real_rename, real_exchange = os.rename, files._exchange
        monkeypatch.setattr(files.os, "rename", lambda a, b: self._step(real_rename, a, b))
        monkeypatch.setattr(files, "_exchange", lambda a, b: self._step(real_exchange, a, b))

    def _step(self, real, a, b):
        self.calls += 1
        if self.calls == self.at and not self.after:
            raise KeyboardInterrupt
        result = real(a, b)
        if self.calls == self.at:
            raise KeyboardInterrupt
        return result


def _count_steps(tmp_path: Path, monkeypatch, exchange: bool) -> int:
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    pairs, _, new = _outputs(tmp_path / "count")
    counter = _Interrupt(monkeypatch, at=10 ** 6, after=False)
    install(pairs)
    assert {dst.name: _tree(dst) for _, dst in pairs} == new
    monkeypatch.undo()
    return counter.calls


@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "two-renames"])
def test_an_interrupt_at_any_step_leaves_every_old_version_or_every_new_one(tmp_path, monkeypatch, exchange):
    steps = _count_steps(tmp_path, monkeypatch, exchange)
    assert steps >= 3
    for at in range(1, steps + 1):
        for after in (False, True):
            case = tmp_path / f"{at}-{after}"
            if not exchange:
                monkeypatch.setattr(files, "_exchange", lambda a, b: False)
            pairs, old, new = _outputs(case)
            _Interrupt(monkeypatch, at, after)
            with pytest.raises(KeyboardInterrupt):
                install(pairs)
            monkeypatch.undo()
            now = {dst.name: _tree(dst) if dst.exists() else None for _, dst in pairs}
            assert now == old, f"interrupted {'after' if after else 'before'} step {at}"
            assert {src.name: _tree(src) for src, _ in pairs} == {src.name: new[dst.name] for src, dst in pairs}
            assert not [p.name for p in case.iterdir() if STAGING_MARK in p.name]


@pytest.mark.skipif(files._renameat2() is None, reason="this system cannot swap two names at once")
def test_a_swap_is_used_where_the_system_has_one(tmp_path):
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").mkdir()
    assert files._exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b").read_text() == "a" and (tmp_path / "a").is_dir()


def test_a_version_left_aside_by_a_killed_process_is_put_back(tmp_path):
    """Killed outright between the two renames (where there is no swap): the next write restores it."""
    out = tmp_path / "report"
    aside = tmp_path / f".report.4242-0.old{STAGING_MARK}"
    aside.mkdir()
    (aside / "report.md").write_text("old")
    with pytest.raises(RuntimeError), staged_dir(out):
        raise RuntimeError("the writer failed")
    assert (out / "report.md").read_text() == "old" and not aside.exists()


@pytest.mark.parametrize("keep", [True, False])
def test_staged_dir_replaces_whole_and_keeps_what_was_not_rewritten_when_asked(tmp_path, keep):
    out = tmp_path / "files"
    out.mkdir()
    (out / "model.onnx").write_text("old model")
    (out / "model.int8.onnx").write_text("old int8")
    inode = (out / "model.int8.onnx").stat().st_ino
    with staged_dir(out, keep=keep) as staging:
        (staging / "model.onnx").write_text("new model")
    expected = {"model.onnx": "new model", **({"model.int8.onnx": "old int8"} if keep else {})}
    assert _tree(out) == expected
    if keep:
        assert (out / "model.int8.onnx").stat().st_ino == inode  # carried over by a hard link, not copied
    assert sorted(p.name for p in tmp_path.iterdir()) == ["files"]


@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "two-renames"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_staged_dir_interrupted_while_putting_in_place_keeps_the_old_directory(tmp_path, monkeypatch, exchange, after):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "labels.json").write_text('["old"]')
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    _Interrupt(monkeypatch, 1, after)
    with pytest.raises(KeyboardInterrupt), staged_dir(out, keep=False) as staging:
        (staging / "labels.json").write_text('["new"]')
    monkeypatch.undo()
    assert _tree(out) == {"labels.json": '["old"]'}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


# ------------------------------------------------------------------------------------ staged
@pytest.fixture
def umask():
    """Set the process's umask for one test."""
    before = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(before)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_staged_file_is_written_beside_out_under_a_marked_name_with_its_suffixes(tmp_path, umask, mask):
    umask(mask)
    out = tmp_path / "model.int8-dynamic.tflite"
    out.write_text("old")
    with staged(out) as tmp:
        assert tmp.parent == tmp_path and not tmp.exists()
        assert STAGING_MARK in tmp.name and tmp.name.startswith(".model.int8-dynamic.tflite.")
        assert tmp.name.endswith(".int8-dynamic.tflite")
        tmp.write_text("new")
        assert out.read_text() == "old"
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_staged_directory_replaces_out_whole_with_the_usual_permissions(tmp_path, umask, mask):
    umask(mask)
    out = tmp_path / "files"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with staged(out, directory=True, keep=False) as tmp:
        assert tmp.is_dir() and not any(tmp.iterdir()) and tmp.parent == tmp_path and STAGING_MARK in tmp.name
        (tmp / "new.txt").write_text("new")
    assert _tree(out) == {"new.txt": "new"} and sorted(p.name for p in tmp_path.iterdir()) == ["files"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
def test_staged_verify_sees_the_new_output_before_it_is_in_place(tmp_path, directory):
    out = tmp_path / ("files" if directory else "model.onnx")
    seen = []

    def verify(path: Path) -> None:
        seen.append((_tree(path), out.exists()))

    with staged(out, directory=directory, verify=verify) as tmp:
        (tmp / "a.txt" if directory else tmp).write_text("new")
    assert seen == [({"a.txt": "new"} if directory else {".": "new"}, False)]
    assert _tree(out) == seen[0][0]


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
def test_staged_verify_that_fails_leaves_the_old_output_and_nothing_else(tmp_path, directory):
    out = tmp_path / ("files" if directory else "model.onnx")
    if directory:
        out.mkdir()
        (out / "a.txt").write_text("old")
    else:
        out.write_text("old")
    before = _tree(out)

    def verify(path: Path) -> None:
        raise ValueError(f"{path} does not agree with PyTorch")

    with pytest.raises(ValueError, match="does not agree"), staged(out, directory=directory, verify=verify) as tmp:
        (tmp / "a.txt" if directory else tmp).write_text("new")
    assert _tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
def test_staged_interrupted_leaves_nothing_behind(tmp_path, directory, exists):
    """Ctrl-C in the middle of writing: the old output as it was; a new one's parents made for it gone."""
    out = (tmp_path / "out" if exists else tmp_path / "new" / "deeper" / "out") / ("files" if directory else "m.onnx")
    if exists:
        atomic_write(out / "a.txt" if directory else out, "old")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(KeyboardInterrupt), staged(out, directory=directory) as tmp:
        (tmp / "a.txt" if directory else tmp).write_text("half")
        raise KeyboardInterrupt
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    if exists:
        assert _tree(out) == ({"a.txt": "old"} if directory else {".": "old"})


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
def test_staged_full_disk_is_one_line_naming_out(tmp_path, directory):
    out = tmp_path / "out" / ("files" if directory else "m.onnx")
    with pytest.raises(OutputError) as raised, staged(out, directory=directory) as tmp:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    message = str(raised.value)
    assert message.startswith(f"cannot write {out}: {out}: the disk is full")
    assert message.endswith(f"({out} was left as it was)") and STAGING_MARK not in message
    assert list(tmp_path.iterdir()) == []


def test_staged_output_error_inside_names_out_once(tmp_path):
    """A file written inside a staging directory fails: the message names the final path, and says
    once that it was left as it was."""
    out = tmp_path / "checkpoint"
    with pytest.raises(OutputError) as raised, staged(out, directory=True) as tmp:
        def full(path: str) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        atomic_write(tmp / "optimizer.pt", full)
    message = str(raised.value)
    assert message.startswith(f"cannot write {out / 'optimizer.pt'}: {out / 'optimizer.pt'}: the disk is full")
    assert message.endswith(f"({out} was left as it was)") and message.count("was left as it was") == 1
    assert STAGING_MARK not in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("nested", [False, True], ids=["scratch-file", "staged-in-scratch"])
def test_staged_full_disk_in_a_writers_scratch_directory_names_the_users_path_only(tmp_path, nested):
    """A writer's own scratch directory inside the staging directory (the transformers-js target
    quantizes in .transformers-js-XXXX/): a full disk there names --out, not the scratch path."""
    out = tmp_path / "out"
    with pytest.raises(OutputError) as raised, staged(out, directory=True) as tmp:
        scratch = tmp / ".transformers-js-k2x9"
        scratch.mkdir()

        def full(path: str) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        if nested:
            atomic_write(scratch / "model.int8-dynamic.onnx", full)
        else:
            full(str(scratch / "model.onnx"))
    message = str(raised.value)
    assert message.startswith(f"cannot write {out}: ") and "the disk is full" in message, message
    assert ".transformers-js-" not in message and STAGING_MARK not in message, message
    assert message.endswith(f"({out} was left as it was)") and message.count("was left as it was") == 1, message
    assert list(tmp_path.iterdir()) == []


def test_staged_start_that_fails_removes_the_parents_it_made(tmp_path, monkeypatch):
    import tempfile

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkdtemp", no_space)
    out = tmp_path / "new" / "deeper" / "files"
    with pytest.raises(OutputError, match="cannot create a temporary directory in .*the disk is full"), \
            staged(out, directory=True):
        pass  # never reached
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("data", [b"\x00bytes", "text \u00e9", lambda path: Path(path).write_bytes(b"by a writer")],
                         ids=["bytes", "text", "writer"])
def test_atomic_write_goes_through_staged(tmp_path, umask, data):
    umask(0o027)
    out = atomic_write(tmp_path / "sub" / "f.json", data)
    expected = {bytes: b"\x00bytes", str: "text \u00e9".encode()}.get(type(data), b"by a writer")
    assert out.read_bytes() == expected and out.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["f.json"]


def test_staged_files_puts_what_was_written_in_place_together(tmp_path):
    from albert_edge.files import staged_files

    a, b, c = tmp_path / "model.int8.onnx", tmp_path / "manifest.json", tmp_path / "model.int8.ort"
    b.write_text("old manifest")
    c.write_text("old twin")
    with staged_files([a, b, c]) as (ta, tb, tc):
        assert ta.parent == tmp_path and ta.name.endswith(".int8.onnx") and not ta.exists()
        ta.write_bytes(b"int8")
        tb.write_text("new manifest")  # tc is not written: the twin stays as it was
    assert a.read_bytes() == b"int8" and b.read_text() == "new manifest" and c.read_text() == "old twin"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "model.int8.onnx", "model.int8.ort"]


@pytest.mark.parametrize("raised", [KeyboardInterrupt, ValueError])
def test_staged_files_leaves_every_file_as_it_was_when_the_block_raises(tmp_path, raised):
    from albert_edge.files import staged_files

    a, b = tmp_path / "q.onnx", tmp_path / "manifest.json"
    b.write_text("old")
    with pytest.raises(raised):
        with staged_files([a, b]) as (ta, tb):
            ta.write_bytes(b"new")
            tb.write_text("new")
            raise raised()
    assert not a.exists() and b.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
