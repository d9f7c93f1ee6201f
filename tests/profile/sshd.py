"""A real OpenSSH server on 127.0.0.1 for the remote-profiling tests: a throwaway host key and
client key in a temporary directory, the current user allowed in by that key only, and a client
ssh_config that reaches it (port, key, known-hosts file, batch mode).

    with LoopbackSshd(tmp_path) as server:
        subprocess.run(["ssh", "-F", server.client_config, server.target, "true"])
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if Path(p).is_file()), None)
MISSING = None if SSHD and shutil.which("ssh") and shutil.which("ssh-keygen") else (
    "OpenSSH server/client not installed (apt-get install -y openssh-server openssh-client)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackSshd:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.port = free_port()
        self.user = getpass.getuser()
        self.target = f"{self.user}@127.0.0.1:{self.port}"
        self.client_config = self.dir / "ssh_config"
        self.log = self.dir / "sshd.log"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> LoopbackSshd:
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "albert-edge-test",
                            "-f", str(d / name)], check=True)
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        (d / "sshd_config").write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {d / 'host_key'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            f"PidFile {d / 'sshd.pid'}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            "LogLevel ERROR",
            "",
        ]))
        self.client_config.write_text("\n".join([
            "Host 127.0.0.1",
            f"  Port {self.port}",
            f"  IdentityFile {d / 'client_key'}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {d / 'known_hosts'}",
            "  StrictHostKeyChecking accept-new",
            "  BatchMode yes",
            "",
        ]))
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self._proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                                      stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text().strip()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port}")

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
