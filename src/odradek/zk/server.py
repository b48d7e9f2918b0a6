"""Start and stop a private, single-node Apache ZooKeeper (Debian's 3.8 package).

The server runs detached (its own session) so it outlives the Python process that started it,
as `odradek up` needs; the pid file in the data dir is how a later `stop()` finds it.

Classpath: Debian's /usr/share/java holds six SLF4J bindings plus log4j-over-slf4j. With the
`/usr/share/java/*` wildcard SLF4J picks a binding by directory order, and pairing
slf4j-log4j12 with log4j-over-slf4j aborts the JVM at startup. zookeeper.jar's manifest already
names every jar it needs, so the classpath is just zookeeper.jar plus the log4j 1.2 binding,
configured by a log4j.properties we write to send everything to data_dir/zookeeper.log.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path

from odradek.process import process_alive

JAVA_DIR = Path("/usr/share/java")
CLASSPATH_JARS: tuple[Path, ...] = (
    JAVA_DIR / "zookeeper.jar",
    JAVA_DIR / "slf4j-log4j12.jar",
    JAVA_DIR / "log4j-1.2.jar",
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t:%C{{1}}@%L] - %m%n
"""


def find_java() -> str | None:
    """Path of the `java` executable, or None."""
    return shutil.which("java")


def check_installed() -> str | None:
    """None when ZooKeeper can run here, else one line saying what to install."""
    if find_java() is None:
        return "java not found: install a JRE (Debian: apt-get install default-jre-headless)"
    missing = [str(jar) for jar in CLASSPATH_JARS if not jar.exists()]
    if missing:
        return f"ZooKeeper jars missing ({', '.join(missing)}): apt-get install zookeeper"
    return None


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (ruok, mntr, ...) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One standalone ZooKeeper listening on `port`, with its snapshots and log in `data_dir`."""

    def __init__(self, data_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.host = host

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "zookeeper.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        snapshots = self.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "tickTime=2000\n"
            f"dataDir={snapshots}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
            "maxClientCnxns=0\n"
            "minSessionTimeout=2000\n"
        )
        (self.data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES.format(log=self.log_file))
        return cfg

    def start(self, timeout: float = 30.0) -> None:
        """Launch the JVM and return once it answers `ruok` with `imok`.

        Raises RuntimeError (naming what to install, or pointing at the log) otherwise; a server
        that did not come up in time is stopped so no stray JVM is left behind.
        """
        problem = check_installed()
        if problem:
            raise RuntimeError(problem)
        if self.is_running():
            raise RuntimeError(f"ZooKeeper already running from {self.data_dir} (pid file)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self._write_config()
        cmd = [
            find_java() or "java",  # check_installed() made sure it is there
            # 256 MB ran out during a 50,000-partition topic creation (the leaders' pipelined
            # ISR writes plus ZooKeeper's in-memory log of recent multis); the JVM takes the
            # heap only as it needs it
            "-Xmx1g",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            f"-Dzookeeper.log.dir={self.data_dir}",
            "-Dzookeeper.log.file=zookeeper.log",
            "-cp",
            ":".join(str(jar) for jar in CLASSPATH_JARS),
            MAIN_CLASS,
            str(cfg),
        ]
        # posix_spawn, not Popen: the server must outlive us, and a Popen object dropped while
        # its child runs warns; setsid detaches it from our terminal's signals.
        log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            pid = os.posix_spawn(cmd[0], cmd, dict(os.environ), setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),  # JVM crashes print to stdout, not log4j
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ])
        finally:
            os.close(log_fd)
        self.pid_file.write_text(f"{pid}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process_alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise RuntimeError(f"ZooKeeper exited at startup; see {self.log_file}")
            if self.is_serving():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper not serving after {timeout}s; see {self.log_file}")

    def is_serving(self) -> bool:
        """`ruok` answers imok as soon as the port is open, before the server takes requests
        ("This ZooKeeper instance is not currently serving requests"), so also ask `srvr`."""
        try:
            return (
                four_letter_word(self.host, self.port, "ruok", timeout=0.5) == "imok"
                and four_letter_word(self.host, self.port, "srvr", timeout=0.5).startswith("Zookeeper version")
            )
        except OSError:
            return False

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def is_running(self) -> bool:
        """True if the process named in the pid file exists (and is not a zombie of ours)."""
        pid = self._pid()
        return pid is not None and process_alive(pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server, SIGKILL it if still alive after `timeout`, remove the pid file."""
        pid = self._pid()
        if pid is not None and process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
                while process_alive(pid):
                    time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
