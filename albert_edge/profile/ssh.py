"""The SSH side of remote profiling: ``--remote`` host specs, the ssh children (so Ctrl-C can kill
them all), one device reached through the system OpenSSH client, and the tar stream files travel
in. Standard library only, plus the ``ssh`` program."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import subprocess
import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import AlbertEdgeError
from .record import ProfileRecord

__all__ = ["RemoteError", "Target", "parse_target", "Children", "SshHost", "CommandFailed", "tar_stream",
           "last_line", "CONNECT_TIMEOUT", "STEP_TIMEOUT"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10  # seconds to open the connection
STEP_TIMEOUT = 600  # seconds for the check and each copy

_TARGET = re.compile(r"^(?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?"
                     r"(?P<host>[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?$")


class RemoteError(AlbertEdgeError):
    """A host could not be reached, logged into, set up or profiled. ``records`` holds what the
    other hosts measured."""

    def __init__(self, message: str, records: Sequence[ProfileRecord] = ()):
        super().__init__(message)
        self.records = list(records)


@dataclass(frozen=True)
class Target:
    """One ``--remote`` host: ``user@host:port``, user and port optional."""

    spec: str
    host: str
    user: str | None = None
    port: int | None = None


def parse_target(spec: str) -> Target:
    """'pi@raspberrypi.local:2222' -> Target; anything else (options included) is a RemoteError."""
    match = _TARGET.match(spec.strip())
    port = int(match.group("port")) if match and match.group("port") else None
    if not match or (port is not None and not 0 < port < 65536):
        raise RemoteError(f"--remote {spec!r}: expected user@host or user@host:port")
    return Target(spec=spec.strip(), host=match.group("host").strip("[]"), user=match.group("user"), port=port)


class Children:
    """The ssh processes running now, so an interrupt can kill them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopped = False

    def run(self, argv: list[str], feed: Callable[[BinaryIO], None] | None,
            timeout: float | None) -> tuple[int, str, str]:
        """Run ``argv``; ``feed`` writes its stdin (from a thread), else stdin stays open and
        silent until it ends (the device side watches it to stop with us)."""
        with contextlib.ExitStack() as stack:
            stdin, write_end = os.pipe()
            with self._lock:
                try:
                    if self.stopped:
                        raise RemoteError("stopped")
                    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                except BaseException:
                    os.close(write_end)
                    raise
                finally:
                    os.close(stdin)  # ssh has its own copy: when it dies, writing fails at once
                self._procs.add(proc)
            if feed is None:
                stack.callback(os.close, write_end)
            else:
                threading.Thread(target=_feed, args=(feed, write_end), daemon=True).start()
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return 124, "", f"no answer within {timeout:.0f} s"
            finally:
                with self._lock:
                    self._procs.discard(proc)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def kill_all(self) -> None:
        with self._lock:
            self.stopped = True
            for proc in self._procs:
                with contextlib.suppress(OSError):
                    proc.kill()


@dataclass
class SshHost:
    """One device reached with the system ssh client: batch mode (keys or an agent, never a
    password prompt), a connect timeout, keep-alives; ``python`` is its interpreter."""

    target: Target
    ssh_config: Path | None
    python: str
    connect_timeout: int
    children: Children

    def ssh(self, command: str, *, feed: Callable[[BinaryIO], None] | None = None,
            timeout: float | None = STEP_TIMEOUT) -> str:
        argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        if self.target.port is not None:
            argv += ["-p", str(self.target.port)]
        if self.target.user is not None:
            argv += ["-l", self.target.user]
        argv += [self.target.host, command]
        log.debug("%s", shlex.join(argv))
        code, out, err = self.children.run(argv, feed, timeout)
        if code == 255:  # ssh's own failure: connection, host key, login
            raise RemoteError(f"{self.target.spec}: cannot connect or log in over ssh: {last_line(err)}")
        if code != 0:
            raise CommandFailed(code, out, err)
        return out

    def py(self, *args: str) -> str:
        return shlex.join([self.python, *args])


def _feed(feed: Callable[[BinaryIO], None], fd: int) -> None:
    with contextlib.suppress(OSError), open(fd, "wb") as fh:  # OSError: ssh went away first
        feed(fh)


def tar_stream(files: list[tuple[Path, str]], fh: BinaryIO) -> None:
    """Write ``files`` (local path, name in the archive) to ``fh`` as one tar stream."""
    with tarfile.open(fileobj=fh, mode="w|") as tar:
        for local, name in files:
            with open(local, "rb") as src:
                info = tarfile.TarInfo(name)
                info.size = os.fstat(src.fileno()).st_size
                info.mode = 0o644
                tar.addfile(info, src)


class CommandFailed(Exception):
    """The command ran on the device and failed; the message is its last line on stderr."""

    def __init__(self, code: int, out: str, err: str):
        super().__init__(last_line(err) or f"exit code {code}")
        self.code = code


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
