"""ZooKeeper's bulk operations on a raw socket of our own: multi-read and fenced write multis.

Why: kazoo spends about 115 us of Python per pipelined get and tens of microseconds per op of a
transaction (op objects, path normalisation, serialisation, result objects), on the thread the
broker's event loop competes with for the GIL. A failover reads and writes thousands of partition
states, so this module speaks the jute wire format itself, with ``struct``, on its own session:

  ConnectRequest  int protocolVersion, long lastZxidSeen, int timeOut, long sessionId,
                  buffer passwd, bool readOnly        -> ConnectResponse (same fields, no zxid)
  multi-read      RequestHeader(int xid, int type=22),
  (3.6+)          n x (MultiHeader(int type=4, bool done=false, int err=-1), string path, bool watch),
                  MultiHeader(-1, true, -1)
    response      ReplyHeader(int xid, long zxid, int err),
                  n x (MultiHeader(type, done, err), GetDataResponse(buffer data, Stat) if type==4
                       else ErrorResponse(int err)),
                  MultiHeader(-1, true, -1)
  multi (write)   RequestHeader(xid, type=14), MultiHeader(13, false, -1) CheckVersion(string path,
                  int version), then per op MultiHeader(1|5|2, false, -1) Create(string path,
                  buffer data, vector<ACL> acl, int flags) | SetData(string path, buffer data,
                  int version) | Delete(string path, int version), MultiHeader(-1, true, -1)
    response      ReplyHeader, per op MultiHeader(type, done, err) + string path for a Create,
                  Stat for a SetData, nothing for CheckVersion/Delete,
                  ErrorResponse(int err) when type == -1 (the multi
                  failed: 0 for ops rolled back, -2 for ops never tried), end MultiHeader

With credentials the session logs in with SASL DIGEST-MD5 right after the ConnectRequest
(zk/sasl.py: opcode 102 requests, GetSASLRequest(buffer token) -> SetSASLResponse(buffer
token)), and each create carries the ACL ``acl_for(path)`` gives (zk/zk_acls.py), encoded as
vector<ACL(int perms, Id(string scheme, string id))>.

Requests are pipelined (every batch is sent before the first response is read). Reads are
idempotent, so any failure (the session expired while idle, the server went away) closes the
socket and the call is retried once on a fresh session. With several servers in the connect
string a ``sync`` goes first, so a read sees every write our kazoo session committed before it.
Writes are never retried here: a multi whose reply was lost may or may not have committed, so it
comes back as None and the caller decides (zk/client.py resends it conditionally through kazoo,
where a write that did commit fails its version check and the controller re-reads).
"""
from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Callable, Sequence

from kazoo.exceptions import EXCEPTIONS, ZookeeperError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from odradek.common.metadata import new_tuple
from odradek.zk.sasl import OP_SASL, SaslLoginError, ZkSaslCredentials, digest_md5_exchange

OP_CREATE = 1
OP_DELETE = 2
OP_SET_DATA = 5
OP_CHECK = 13
OP_MULTI = 14
OP_GET_DATA = 4
OP_SYNC = 9
OP_CLOSE = -11
OP_MULTI_READ = 22
OP_ERROR = -1
ERR_NONODE = -101
ERR_UNIMPLEMENTED = -6

MAX_BATCH = 1000  # getData ops per multi-read request
_PATH_CACHE_MAX = 200_000  # encoded paths kept (a partition state znode each)

_INT = struct.Struct(">i")
_HDR = struct.Struct(">iiq i")  # length, xid, zxid, err  (reply)
_MULTI_HDR = struct.Struct(">i?i")  # type, done, err
_STAT = struct.Struct(">qqqqiiiqiiq")
_END = _MULTI_HDR.pack(-1, True, -1)
_GET_HDR = _MULTI_HDR.pack(OP_GET_DATA, False, -1)
_OP_HDRS = {op: _MULTI_HDR.pack(op, False, -1)
            for op in (OP_CHECK, OP_CREATE, OP_SET_DATA, OP_DELETE)}
# a persistent znode open to all (ZooKeeper's OPEN_ACL_UNSAFE: perms ALL, world:anyone), flags 0
_OPEN_ACL_PERSISTENT = (_INT.pack(1) + _INT.pack(31) + _INT.pack(5) + b"world" + _INT.pack(6)
                        + b"anyone" + _INT.pack(0))
_PERSISTENT = _INT.pack(0)  # a create's flags: persistent, not sequential

#: One write inside a multi: (OP_CREATE, OP_SET_DATA or OP_DELETE, path, data, expected
#: version); data is ignored for a delete, the version for a create.
WriteOp = tuple[int, str, bytes, int]


class RawSessionError(Exception):
    """The server refused or broke the exchange (after the one retry)."""


class MultiReadUnsupportedError(RawSessionError):
    """The server is older than 3.6: callers fall back to pipelined single reads."""


class RawSessionAuthError(RawSessionError):
    """The server refused our SASL login (wrong username or password)."""


def encode_acls(acls: Sequence[ACL]) -> bytes:
    """A create's vector<ACL> as jute writes it."""
    parts = [_INT.pack(len(acls))]
    for acl in acls:
        scheme, ident = acl.id.scheme.encode(), acl.id.id.encode()
        parts += [_INT.pack(acl.perms), _INT.pack(len(scheme)), scheme, _INT.pack(len(ident)), ident]
    return b"".join(parts)


def _parse_hosts(connect: str) -> tuple[list[tuple[str, int]], str]:
    hosts, slash, chroot = connect.partition("/")
    out = []
    for h in hosts.split(","):
        host, _, port = h.strip().rpartition(":")
        out.append((host or h.strip(), int(port) if host else 2181))
    return out, (slash + chroot).rstrip("/")


class RawSession:
    """Thread-safe; one session, opened lazily, kept open between calls."""

    def __init__(self, connect: str, session_timeout_s: float = 30.0,
                 connect_timeout_s: float = 5.0, sasl: ZkSaslCredentials | None = None,
                 acl_for: Callable[[str], Sequence[ACL]] | None = None) -> None:
        """``sasl``: log in as this user on every connection; ``acl_for``: the ACL of a znode
        a multi creates, by path (open to all without it)."""
        self._hosts, self._chroot = _parse_hosts(connect)
        self._sasl = sasl
        self._acl_for = acl_for
        self._acl_wire: dict[tuple[ACL, ...], bytes] = {}  # encode_acls of each ACL list seen
        self._session_timeout_ms = int(session_timeout_s * 1000)
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._xid = 0
        #: replies read while waiting for a later request's (writes sent but not yet collected,
        #: see start_fenced_multis), by xid; they belong to the current socket only
        self._stash: dict[int, tuple[bytes, int]] = {}
        self._paths: dict[str, bytes] = {}  # see _path
        self.unsupported = False

    # session ---------------------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        hosts = list(self._hosts)
        random.shuffle(hosts)
        error: Exception | None = None
        for host, port in hosts:
            try:
                sock = socket.create_connection((host, port), timeout=self._connect_timeout_s)
            except OSError as exc:
                error = exc
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                body = struct.pack(">iqiqi16s?", 0, 0, self._session_timeout_ms, 0, 16, b"\0" * 16,
                                   False)
                sock.sendall(_INT.pack(len(body)) + body)
                reply = self._recv_frame(sock)
                _proto, timeout_ms, session_id = struct.unpack_from(">iiq", reply, 0)
                if session_id == 0 or timeout_ms <= 0:
                    raise RawSessionError("ZooKeeper refused the session")
                self._xid = 0
                self._stash.clear()
                if self._sasl is not None:
                    self._login(sock, f"{host}:{port}", self._sasl)
                sock.settimeout(max(self._connect_timeout_s, timeout_ms / 1000))
                return sock
            except RawSessionAuthError:
                sock.close()
                raise  # every server checks the same users: no use asking the next one
            except (OSError, struct.error, RawSessionError) as exc:
                sock.close()
                error = exc
        raise RawSessionError(f"cannot open a ZooKeeper session at {self._hosts}: {error}")

    def _login(self, sock: socket.socket, server: str, credentials: ZkSaslCredentials) -> None:
        """SASL DIGEST-MD5 on a new connection (zk/sasl.py); RawSessionAuthError if the server
        refuses it."""
        def round_trip(token: bytes) -> bytes | None:
            self._xid += 1
            body = struct.pack(">ii", self._xid, OP_SASL) + _INT.pack(len(token)) + token
            sock.sendall(_INT.pack(len(body)) + body)
            frame, err = self._recv_reply(sock, self._xid)
            if err != 0:
                raise RawSessionAuthError(
                    f"ZooKeeper {server} refused the SASL DIGEST-MD5 login of user {credentials.username!r} "
                    f"(error {err}: {EXCEPTIONS.get(err, ZookeeperError).__name__}): wrong username or password, or a user the "
                    f"server's JAAS Server section does not have")
            (length,) = _INT.unpack_from(frame, 16)
            return None if length < 0 else frame[20:20 + length]

        try:
            digest_md5_exchange(credentials, round_trip)
        except SaslLoginError as exc:
            raise RawSessionAuthError(f"ZooKeeper {server}: {exc}") from None

    def open(self) -> None:
        """Open the session now (logging in, with credentials) rather than at the first call:
        RawSessionAuthError tells a wrong password at once, RawSessionError an unreachable
        ZooKeeper."""
        with self._lock:
            if self._sock is None:
                self._sock = self._connect()

    @staticmethod
    def _recv_exactly(sock: socket.socket, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            # MSG_WAITALL: one blocking call per frame, so the GIL is released and re-taken
            # once rather than per 64 KB (each re-take can wait a whole switch interval
            # behind the broker's busy event loop)
            k = sock.recv_into(view[got:], n - got, socket.MSG_WAITALL)
            if not k:
                raise ConnectionError("ZooKeeper closed the connection")
            got += k
        return bytes(buf)

    def _recv_frame(self, sock: socket.socket) -> bytes:
        (length,) = _INT.unpack(self._recv_exactly(sock, 4))
        if length < 0 or length > 512 * 1024 * 1024:
            raise RawSessionError(f"bad frame length {length}")
        return self._recv_exactly(sock, length)

    def _recv_reply(self, sock: socket.socket, xid: int) -> tuple[bytes, int]:
        """The reply frame to request ``xid`` and its error code, skipping pings and events;
        replies to earlier requests still to be collected are kept for their collector."""
        stashed = self._stash.pop(xid, None)
        if stashed is not None:
            return stashed
        while True:
            frame = self._recv_frame(sock)
            got_xid, _zxid, err = struct.unpack_from(">iqi", frame, 0)
            if got_xid < 0:  # -2 is a ping, -1 a watch event: not ours
                continue
            if got_xid == xid:
                return frame, err
            if got_xid > xid:  # ZooKeeper answers a session's requests in order
                raise RawSessionError(f"xid {got_xid}, expected {xid}")
            self._stash[got_xid] = (frame, err)

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            try:
                self._xid += 1
                sock.sendall(_INT.pack(8) + struct.pack(">ii", self._xid, OP_CLOSE))
            except OSError:
                pass
            sock.close()

    # reads -----------------------------------------------------------------------------------

    def get_data_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        """getData of every path, in order; None where the znode does not exist."""
        if not paths:
            return []
        if self.unsupported:
            raise MultiReadUnsupportedError("multi-read not supported by this ZooKeeper")
        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._sock is None:
                        self._sock = self._connect()
                    return self._get_data_many(self._sock, paths)
                except MultiReadUnsupportedError:
                    self.unsupported = True
                    self._drop_socket()  # its other replies will never be read
                    raise
                except (OSError, struct.error, RawSessionError, IndexError) as exc:
                    self._drop_socket()
                    if attempt:
                        raise RawSessionError(f"multi-read failed: {exc!r}") from exc
        raise AssertionError("unreachable")

    def _get_data_many(self, sock: socket.socket, paths: Sequence[str]) -> list:
        wire_path = self._path
        frames = []
        xids = []
        if len(self._hosts) > 1:  # catch up with the leader before reading (see module doc)
            self._xid += 1
            body = struct.pack(">ii", self._xid, OP_SYNC) + _INT.pack(1) + b"/"
            frames.append(_INT.pack(len(body)) + body)
            xids.append((self._xid, 0, 0))
        for start in range(0, len(paths), MAX_BATCH):
            chunk = paths[start:start + MAX_BATCH]
            self._xid += 1
            parts = [struct.pack(">ii", self._xid, OP_MULTI_READ)]
            for path in chunk:
                parts.append(_GET_HDR)
                parts.append(wire_path(path))
                parts.append(b"\0")  # watch = false
            parts.append(_END)
            body = b"".join(parts)
            frames.append(_INT.pack(len(body)) + body)
            xids.append((self._xid, start, len(chunk)))
        sock.sendall(b"".join(frames))
        out: list = [None] * len(paths)
        stat_size = _STAT.size
        unpack_hdr = _MULTI_HDR.unpack_from
        unpack_int = _INT.unpack_from
        unpack_stat = _STAT.unpack_from
        for xid, start, count in xids:
            frame, err = self._recv_reply(sock, xid)
            if err == ERR_UNIMPLEMENTED:
                raise MultiReadUnsupportedError(f"opcode {OP_MULTI_READ} unimplemented")
            if err != 0:
                raise RawSessionError(f"ZooKeeper error {err} for the multi-read")
            if count == 0:  # the sync
                continue
            pos = 16
            for i in range(start, start + count):
                op_type, done, op_err = unpack_hdr(frame, pos)
                pos += 9
                if done:
                    raise RawSessionError("multi-read response ended early")
                if op_type == OP_GET_DATA:
                    (length,) = unpack_int(frame, pos)
                    pos += 4
                    if length < 0:
                        data = b""
                    else:
                        data = frame[pos:pos + length]
                        pos += length
                    out[i] = (data, new_tuple(ZnodeStat, unpack_stat(frame, pos)))
                    pos += stat_size
                elif op_type == OP_ERROR:
                    (code,) = unpack_int(frame, pos)
                    pos += 4
                    if code == ERR_UNIMPLEMENTED:
                        raise MultiReadUnsupportedError("getData inside multi-read unimplemented")
                    if code != ERR_NONODE:
                        raise RawSessionError(f"ZooKeeper error {code} reading {paths[i]}")
                else:
                    raise RawSessionError(f"unexpected op type {op_type} in multi-read response")
            if not unpack_hdr(frame, pos)[1]:
                raise RawSessionError("multi-read response has more results than requests")
        return out

    # writes ----------------------------------------------------------------------------------

    def fenced_multis(self, check_path: str, check_version: int,
                      batches: Sequence[Sequence[WriteOp]]) -> list[list[object] | None]:
        """One multi per batch, each opening with a version check of ``check_path``, all sent
        before any reply is read. Per batch, kazoo's result shape: [check, *ops], each True
        (check, delete), a ZnodeStat (set) or a kazoo exception instance; None for a batch
        whose reply never came (see the module doc)."""
        return self.start_fenced_multis(check_path, check_version, batches)()

    def start_fenced_multis(self, check_path: str, check_version: int,
                            batches: Sequence[Sequence[WriteOp]]
                            ) -> Callable[[], list[list[object] | None]]:
        """``fenced_multis`` in two halves: this one sends, the returned one reads the replies.
        In between the caller may work, and even use this session (its replies are kept
        apart), while ZooKeeper applies the writes."""
        results: list[list[object] | None] = [None] * len(batches)
        if not batches:
            return lambda: results
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = self._connect()
                sock = self._sock
                xids = self._send_fenced_multis(sock, check_path, check_version, batches)
            except (OSError, struct.error, RawSessionError):
                self._drop_socket()
                return lambda: results

        collected = False

        def collect() -> list[list[object] | None]:
            nonlocal collected
            with self._lock:
                if collected or self._sock is not sock:  # or reconnected: these replies are lost
                    return results
                collected = True
                try:
                    for i, (xid, batch) in enumerate(zip(xids, batches)):
                        results[i] = self._parse_multi_reply(*self._recv_reply(sock, xid), batch)
                except (OSError, struct.error, RawSessionError, IndexError):
                    self._drop_socket()
            return results

        return collect

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _acl(self, path: str) -> bytes:
        """The wire form of a create's ACL and flags (persistent) for ``path``."""
        assert self._acl_for is not None
        acls = tuple(self._acl_for(path))
        wire = self._acl_wire.get(acls)
        if wire is None:
            wire = self._acl_wire[acls] = encode_acls(acls) + _PERSISTENT
        return wire

    def _path(self, path: str) -> bytes:
        """A path as the wire has it (length, chrooted bytes); kept, since a controller
        writes the same partition state znodes in every failover."""
        encoded = self._paths.get(path)
        if encoded is None:
            raw = (self._chroot + path).encode() if self._chroot else path.encode()
            encoded = _INT.pack(len(raw)) + raw
            if len(self._paths) >= _PATH_CACHE_MAX:
                self._paths.clear()
            self._paths[path] = encoded
        return encoded

    def _send_fenced_multis(self, sock: socket.socket, check_path: str, check_version: int,
                            batches: Sequence[Sequence[WriteOp]]) -> list[int]:
        check = _OP_HDRS[OP_CHECK] + self._path(check_path) + _INT.pack(check_version)
        wire_path = self._path
        xids = []
        for batch in batches:
            self._xid += 1
            parts = [struct.pack(">ii", self._xid, OP_MULTI), check]
            for kind, path, data, version in batch:
                parts.append(_OP_HDRS[kind])
                parts.append(wire_path(path))
                if kind == OP_CREATE:
                    parts.append(_INT.pack(len(data)))
                    parts.append(data)
                    parts.append(_OPEN_ACL_PERSISTENT if self._acl_for is None else self._acl(path))
                    continue
                if kind == OP_SET_DATA:
                    parts.append(_INT.pack(len(data)))
                    parts.append(data)
                parts.append(_INT.pack(version))
            parts.append(_END)
            body = b"".join(parts)
            # each multi goes out as soon as it is built: ZooKeeper works on it meanwhile
            sock.sendall(_INT.pack(len(body)) + body)
            xids.append(self._xid)
        return xids

    def _parse_multi_reply(self, frame: bytes, err: int, batch: Sequence[WriteOp]) -> list[object]:
        if err != 0:
            raise RawSessionError(f"ZooKeeper error {err} for a multi")
        unpack_hdr = _MULTI_HDR.unpack_from
        unpack_int = _INT.unpack_from
        out: list[object] = []
        pos = 16
        while True:
            op_type, done, _ = unpack_hdr(frame, pos)
            pos += 9
            if done:
                break
            if op_type == OP_SET_DATA:
                out.append(new_tuple(ZnodeStat, _STAT.unpack_from(frame, pos)))
                pos += _STAT.size
            elif op_type in (OP_CHECK, OP_DELETE):
                out.append(True)
            elif op_type == OP_CREATE:  # the created path, without our chroot (as kazoo)
                (length,) = unpack_int(frame, pos)
                created = frame[pos + 4:pos + 4 + length].decode()
                pos += 4 + length
                out.append(created[len(self._chroot):] or "/")
            elif op_type == OP_ERROR:
                (code,) = unpack_int(frame, pos)
                pos += 4
                out.append(EXCEPTIONS.get(code, ZookeeperError)())
            else:
                raise RawSessionError(f"unexpected op type {op_type} in a multi response")
        if len(out) != len(batch) + 1:
            raise RawSessionError(f"multi response has {len(out)} results for {len(batch) + 1} ops")
        return out
