"""Start and stop private Apache ZooKeeper servers (Debian's 3.8 package, QuorumPeerMain):
one standalone server, or a ZooKeeperEnsemble of several that elect a leader among themselves.

Each server runs detached (its own session) so it outlives the Python process that started it,
as `odradek up` needs; the pid file in the data dir is how a later `stop()` finds it.

Classpath: Debian's /usr/share/java holds six SLF4J bindings plus log4j-over-slf4j. With the
`/usr/share/java/*` wildcard SLF4J picks a binding by directory order, and pairing
slf4j-log4j12 with log4j-over-slf4j aborts the JVM at startup. zookeeper.jar's manifest already
names every jar it needs, so the classpath is just zookeeper.jar plus the log4j 1.2 binding,
configured by a log4j.properties we write to send everything to data_dir/zookeeper.log.

With ``sasl_users`` (user -> password) the server authenticates clients with SASL DIGEST-MD5, as
Kafka's docs set ZooKeeper up for zookeeper.set.acl: zoo.cfg registers ZooKeeper's
SASLAuthenticationProvider, and a JAAS file (data_dir/zookeeper_jaas.conf, passed with
-Djava.security.auth.login.config) holds the users in its Server section, as DigestLoginModule's
user_<name>="<password>" options. With ``enforce_sasl`` (the default then) the server also
refuses every request of a client that has not logged in (ZooKeeper 3.7+'s
enforce.auth.enabled=true, enforce.auth.schemes=sasl: such a request is answered with
SESSIONCLOSEDREQUIRESASLAUTH and the session closed), so only the users listed can use it at
all; four-letter words (ruok, srvr, mntr) still answer anyone. Without it, clients that do not
log in are served as the world Id, and only the ACLs of the znodes keep them out.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from odradek.common.netutil import free_port
from odradek.common.process import process_alive

JAVA_DIR = Path("/usr/share/java")
CLASSPATH_JARS: tuple[Path, ...] = (
    JAVA_DIR / "zookeeper.jar",
    JAVA_DIR / "slf4j-log4j12.jar",
    JAVA_DIR / "log4j-1.2.jar",
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
JAAS_FILE = "zookeeper_jaas.conf"

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t:%C{{1}}@%L] - %m%n
"""


def _jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (Java's StreamTokenizer undoes these escapes)."""
    if "\n" in value or "\r" in value:
        raise ValueError("a ZooKeeper SASL user name or password cannot hold a line break")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def server_jaas_config(users: Mapping[str, str]) -> str:
    """The JAAS Server section giving each user its password (DigestLoginModule's
    user_<name> options)."""
    bad = [u for u in users if not u or any(c.isspace() or c in '{};="\'/' for c in u)]
    if bad:
        raise ValueError(f"ZooKeeper SASL user names must be non-empty, without spaces or {{}};=\"'/: {bad}")
    options = "".join(f"\n    user_{user}={_jaas_quote(password)}" for user, password in users.items())
    return f"Server {{\n  {DIGEST_LOGIN_MODULE} required{options};\n}};\n"


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


def server_mode(host: str, port: int, timeout: float = 1.0) -> str:
    """What `srvr` says this server is: "leader", "follower", "standalone" (or "observer");
    "not serving" for a running member of an ensemble without a quorum (it is looking for a
    leader and refuses clients); "down" when nothing answers on the port."""
    try:
        reply = four_letter_word(host, port, "srvr", timeout)
    except OSError:
        return "down"
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return "not serving"


def connect_string_servers(connect: str) -> list[tuple[str, int]]:
    """(host, port) of every server in a connect string such as `zk1:2181,zk2:2181/chroot`."""
    hosts = connect.partition("/")[0]
    out = []
    for entry in hosts.split(","):
        host, sep, port = entry.strip().rpartition(":")
        out.append((host, int(port)) if sep and port.isdigit() else (entry.strip(), 2181))
    return out


@dataclass(frozen=True)
class QuorumPeer:
    """One server of an ensemble as every member's zoo.cfg names it (`server.N=host:quorum:election`):
    followers talk to the leader on `quorum_port`, leader election runs on `election_port`."""

    server_id: int
    host: str
    client_port: int
    quorum_port: int
    election_port: int

    def config_line(self) -> str:
        return f"server.{self.server_id}={self.host}:{self.quorum_port}:{self.election_port}"


class ZooKeeperServer:
    """One ZooKeeper listening on `port`, with its snapshots and log in `data_dir`: standalone,
    or, with `quorum` (every member, itself included) and its `server_id`, a member of an
    ensemble, which serves clients only while a majority of the members are up."""

    def __init__(self, data_dir: Path, port: int, host: str = "127.0.0.1",
                 server_id: int | None = None, quorum: Sequence[QuorumPeer] = (),
                 sasl_users: Mapping[str, str] | None = None, enforce_sasl: bool = True) -> None:
        """``sasl_users``: authenticate clients with SASL DIGEST-MD5 as these users (name ->
        password); ``enforce_sasl``: and serve no client that has not (see the module doc)."""
        self.data_dir = Path(data_dir)
        self.port = port
        self.host = host
        self.server_id = server_id
        self.quorum = tuple(quorum)
        self.sasl_users = dict(sasl_users) if sasl_users is not None else None
        self.enforce_sasl = enforce_sasl and self.sasl_users is not None
        if self.sasl_users is not None:
            server_jaas_config(self.sasl_users)  # refuse bad names now, not at launch
        if self.quorum and server_id not in {p.server_id for p in self.quorum}:
            raise ValueError(f"server id {server_id} is not one of the quorum's {[p.server_id for p in self.quorum]}")

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "zookeeper.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def jaas_file(self) -> Path:
        """The server's JAAS file (written at launch when it has ``sasl_users``)."""
        return self.data_dir / JAAS_FILE

    def _write_config(self) -> Path:
        snapshots = self.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        text = (
            "tickTime=2000\n"
            f"dataDir={snapshots}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
            "maxClientCnxns=0\n"
            "minSessionTimeout=2000\n"
        )
        if self.sasl_users is not None:
            text += f"authProvider.sasl={SASL_AUTH_PROVIDER}\n"
            if self.enforce_sasl:  # ZooKeeper 3.7+; the Debian package is 3.8
                text += "enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n"
            # the passwords: readable by us alone from the start
            fd = os.open(self.jaas_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(server_jaas_config(self.sasl_users))
        if self.quorum:
            # initLimit / syncLimit (in ticks): how long a follower may take to load the
            # leader's snapshot, and to answer it afterwards, before it is dropped. A killed
            # peer's sockets are reset by the kernel at once, so these bound only hung peers.
            text += "initLimit=10\nsyncLimit=5\n" + "".join(p.config_line() + "\n" for p in self.quorum)
            (snapshots / "myid").write_text(f"{self.server_id}\n")
        cfg.write_text(text)
        (self.data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES.format(log=self.log_file))
        return cfg

    def start(self, timeout: float = 30.0) -> None:
        """Launch the JVM and return once it serves clients (see is_serving).

        Raises RuntimeError (naming what to install, or pointing at the log) otherwise; a server
        that did not come up in time is stopped so no stray JVM is left behind. A member of an
        ensemble serves only once a majority of the members run: start them with
        ZooKeeperEnsemble.start, which launches them all before waiting.
        """
        self.launch()
        self.wait_serving(timeout)

    def launch(self) -> int:
        """Spawn the JVM without waiting for it; returns its pid (also in the pid file)."""
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
            *([f"-Djava.security.auth.login.config={self.jaas_file}"] if self.sasl_users is not None else []),
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
        return pid

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Return once the launched server serves clients; stop it and raise RuntimeError if it
        exits or does not serve within `timeout`."""
        pid = self.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pid is None or not process_alive(pid):
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

    def mode(self) -> str:
        """leader / follower / standalone, "not serving" or "down" (see server_mode)."""
        return server_mode(self.host, self.port) if self.is_running() else "down"

    @property
    def pid(self) -> int | None:
        """The pid in the pid file (the process may have died since)."""
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def is_running(self) -> bool:
        """True if the process named in the pid file exists (and is not a zombie of ours)."""
        pid = self.pid
        return pid is not None and process_alive(pid)

    def kill(self) -> None:
        """SIGKILL the server (a crash: no clean shutdown) and wait until it is gone."""
        self.stop(timeout=0.0)

    def _alive(self, pid: int) -> bool:
        """Whether ``pid`` is still this server: alive and its command line naming this server's
        directory. Once the server has exited its pid may be given to another process at once
        (pid_max is 32,768 on many machines, and tests start processes all the time): seen when
        a stop's SIGKILL took a broker another test had just started."""
        if not process_alive(pid):
            return False
        try:
            return str(self.data_dir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM the server, SIGKILL it if still alive after `timeout` (at once with 0),
        remove the pid file. Returns whether it had to be killed."""
        pid = self.pid
        killed = False
        if pid is not None and self._alive(pid):
            if timeout > 0:
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive(pid):
                os.kill(pid, signal.SIGKILL)
                killed = True
                while self._alive(pid):
                    time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return killed


class ZooKeeperEnsemble:
    """Several ZooKeeper servers forming one quorum (QuorumPeerMain with `server.N` lines), each
    under `data_dir`/server-N, for clusters that must survive a ZooKeeper server's death and for
    tests that kill and restart servers one by one.

    With 2f+1 servers, f may die without clients noticing more than a reconnect; losing the
    leader costs one leader election among the rest. Without a majority no server serves.
    """

    def __init__(self, data_dir: Path, peers: Sequence[QuorumPeer],
                 sasl_users: Mapping[str, str] | None = None, enforce_sasl: bool = True) -> None:
        """``sasl_users`` and ``enforce_sasl``: every server's, see ZooKeeperServer."""
        if not peers:
            raise ValueError("an ensemble needs at least one server")
        self.data_dir = Path(data_dir)
        self.peers = tuple(sorted(peers, key=lambda p: p.server_id))
        self.servers = {p.server_id: ZooKeeperServer(self.data_dir / f"server-{p.server_id}", p.client_port,
                                                     p.host, p.server_id, self.peers, sasl_users, enforce_sasl)
                        for p in self.peers}

    @classmethod
    def on_free_ports(cls, data_dir: Path, size: int = 3, host: str = "127.0.0.1",
                      client_ports: Sequence[int] | None = None,
                      sasl_users: Mapping[str, str] | None = None, enforce_sasl: bool = True
                      ) -> "ZooKeeperEnsemble":
        """An ensemble of `size` servers numbered 1..size; client ports as given (default: free
        ones), quorum and election ports always picked free."""
        ports = list(client_ports) if client_ports is not None else [free_port(host) for _ in range(size)]
        if len(ports) != size:
            raise ValueError(f"{len(ports)} client ports for {size} servers")
        taken = set(ports)
        peers = []
        for server_id, client_port in enumerate(ports, 1):
            quorum_port, election_port = _free_ports_besides(host, taken, 2)
            peers.append(QuorumPeer(server_id, host, client_port, quorum_port, election_port))
        return cls(data_dir, peers, sasl_users, enforce_sasl)

    @property
    def server_ids(self) -> list[int]:
        return [p.server_id for p in self.peers]

    @property
    def connect_string(self) -> str:
        """Every server, so a client moves to another when its server dies."""
        return ",".join(s.connect_string for s in self.servers.values())

    @property
    def quorum_size(self) -> int:
        return len(self.peers) // 2 + 1

    def start(self, timeout: float = 30.0) -> None:
        """Launch every server that is not running, then wait until all of them serve (they
        elect a leader once a majority is up). A server that fails stops the rest it started."""
        launched = [s for s in self.servers.values() if not s.is_running()]
        try:
            for server in launched:
                server.launch()
            deadline = time.monotonic() + timeout
            for server in launched:
                server.wait_serving(max(0.1, deadline - time.monotonic()))
        except BaseException:
            for server in launched:
                server.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every server (SIGTERM, SIGKILL after `timeout`), by pid."""
        for server in self.servers.values():
            server.stop(timeout)

    def kill(self, server_id: int) -> None:
        """kill -9 one server and wait until it is gone."""
        self.servers[server_id].kill()

    def restart(self, server_id: int, timeout: float = 30.0, wait: bool = True) -> None:
        """Start a stopped or killed server again with its data; with `wait`, return once it
        serves (which needs a majority running, counting it)."""
        server = self.servers[server_id]
        if server.is_running():
            server.stop()
        server.launch()
        if wait:
            server.wait_serving(timeout)

    def modes(self) -> dict[int, str]:
        """server id -> leader / follower / "not serving" / "down"."""
        return {sid: server.mode() for sid, server in self.servers.items()}

    def leader_id(self) -> int | None:
        return next((sid for sid, mode in self.modes().items() if mode == "leader"), None)

    def pids(self) -> dict[int, int | None]:
        """server id -> pid of the running server, None for one that is not running."""
        return {sid: s.pid if s.is_running() else None for sid, s in self.servers.items()}

    def wait_for_quorum(self, timeout: float = 30.0) -> None:
        """Block until one server leads and a majority serve (e.g. after a restart)."""
        deadline = time.monotonic() + timeout
        while True:
            modes = self.modes()
            serving = [m for m in modes.values() if m in ("leader", "follower")]
            if "leader" in serving and len(serving) >= self.quorum_size:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no ZooKeeper quorum after {timeout:g} s: {modes}")
            time.sleep(0.1)


def _free_ports_besides(host: str, taken: set[int], count: int) -> list[int]:
    """`count` free ports not in `taken` (which they are added to)."""
    out: list[int] = []
    while len(out) < count:
        port = free_port(host)
        if port not in taken:
            taken.add(port)
            out.append(port)
    return out
