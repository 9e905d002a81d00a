"""A fault-injecting HTTP proxy in front of the tests' S3-compatible server (moto's).

Lance (through its object-store client) talks to the proxy exactly as it would to S3; the
proxy forwards every request to the upstream server unchanged (the Host header too: it is
signed) unless a :class:`Fault` matches it (by method and path regex). Faults, switchable
at run time from the test thread:

- ``status``: answer 503 (S3's ``SlowDown`` body) or 500 (``InternalError``) without
  forwarding: the request never reaches the store;
- ``slow``: wait ``delay_ms`` before forwarding (a client that times out first never
  reached the store);
- ``cut``: forward, then send only the first half of the response and close the
  connection (the request took effect, the client reads a truncated answer);
- ``lose``: forward, then close the connection without answering (the request took effect,
  the client sees a failure): e.g. a manifest PUT that commits a version.

Which matching requests are hit: the ``nth`` (1-based) and the ones after it, each with
probability ``fraction`` (seeded), at most ``limit`` of them; with ``after=<another fault>``
only once that one has been injected (e.g. refuse reads of a manifest after its write's
answer was lost). Every injected fault is
counted (:attr:`FaultProxy.injected`, :meth:`FaultProxy.hits`) so that a test can prove
faults were injected at all. 127.0.0.1 only; threads are daemons; sockets and waits are
bounded; :meth:`FaultProxy.stop` ends it.

    python tests/fault_proxy.py --upstream http://127.0.0.1:9000    # by hand, healthy
"""
from __future__ import annotations

import argparse
import http.client
import random
import re
import select
import socket
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from ports import free_port

MODES = ("status", "slow", "cut", "lose")
# Hop-by-hop headers (RFC 9110 7.6.1): never forwarded; bodies are re-sent with a length.
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
        "te", "trailer", "transfer-encoding", "upgrade"}
_S3_ERRORS = {503: ("SlowDown", "Please reduce your request rate."),
              500: ("InternalError", "We encountered an internal error. Please try again.")}
# Bounds: an upstream call, an idle client connection, and one injected delay.
UPSTREAM_TIMEOUT = 30.0
CLIENT_IDLE_TIMEOUT = 60.0
MAX_DELAY_MS = 60_000


@dataclass
class Fault:
    """What to do to which requests. ``method`` and ``path`` are regexes searched in the
    request's method and its path with the query string (``/bucket/key?x=y``)."""

    mode: str
    method: str = ".*"
    path: str = ".*"
    status: int = 503
    delay_ms: int = 0
    nth: int = 1
    fraction: float = 1.0
    limit: int | None = None
    seed: int = 0
    after: "Fault | None" = None  # armed only once this other fault has been injected
    matched: int = 0
    injected: int = 0
    _rng: random.Random = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"fault mode {self.mode!r}: expected one of {MODES}")
        if self.mode == "status" and self.status not in _S3_ERRORS:
            raise ValueError(f"status {self.status}: expected one of {sorted(_S3_ERRORS)}")
        if not 0 <= self.delay_ms <= MAX_DELAY_MS:
            raise ValueError(f"delay_ms {self.delay_ms}: expected 0..{MAX_DELAY_MS}")
        self._method, self._path = re.compile(self.method), re.compile(self.path)
        self._rng = random.Random(self.seed)

    def decide(self, method: str, path: str) -> bool:
        """Whether this request gets the fault (call under the proxy's lock)."""
        if not (self._method.search(method) and self._path.search(path)):
            return False
        if self.after is not None and self.after.injected == 0:
            return False
        self.matched += 1
        if self.matched < self.nth or (self.limit is not None and self.injected >= self.limit):
            return False
        if self.fraction < 1.0 and self._rng.random() >= self.fraction:
            return False
        self.injected += 1
        return True


class FaultProxy:
    """The proxy: ``start()``, point ``aws_endpoint`` at :attr:`endpoint`, ``inject(...)``,
    ``heal()``, ``stop()``."""

    def __init__(self, upstream: str, port: int | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"upstream {upstream}: the proxy forwards to the loopback address only")
        self.upstream = (parts.hostname, parts.port or 80)
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.injected: Counter = Counter()  # mode -> faults injected since start
        self.log: list[tuple[str, str, str]] = []  # (mode, method, path) of every fault injected
        self.requests = 0
        # (method, path, upstream status) of the latest forwarded requests, faulted or not.
        self.forwarded: deque[tuple[str, str, int]] = deque(maxlen=10_000)
        # (method, path, the access key id it was signed with or None) of the latest requests
        # received: whose credentials each request carried (see signer()).
        self.signed: deque[tuple[str, str, str | None]] = deque(maxlen=10_000)
        self._connections: set[socket.socket] = set()  # open client connections, closed by stop()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control, from the test thread ---------------------------------------------------
    def inject(self, mode: str, **kwargs) -> Fault:
        """Add a fault (see :class:`Fault`); returns it (its ``matched``/``injected`` counts)."""
        fault = Fault(mode, **kwargs)
        with self._lock:
            self._faults.append(fault)
        return fault

    def heal(self) -> None:
        """No more faults from now on (counts are kept)."""
        with self._lock:
            self._faults.clear()

    def hits(self, mode: str | None = None, path: str = "") -> int:
        """Faults injected (of ``mode``, on paths containing ``path``) since start."""
        with self._lock:
            return sum(1 for m, _, p in self.log if (mode is None or m == mode) and path in p)

    def statuses(self, method: str, path: str) -> list[int]:
        """Upstream statuses of forwarded requests matching ``method`` and the ``path`` regex."""
        with self._lock:
            return [st for m, p, st in self.forwarded if m == method and re.search(path, p)]

    def signers(self, path: str = "") -> list[str | None]:
        """The key id of every request received (None: unsigned) whose path contains ``path``."""
        with self._lock:
            return [k for _, p, k in self.signed if path in p]

    def _choose(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests += 1
            for fault in self._faults:
                if fault.decide(method, path):
                    self.injected[fault.mode] += 1
                    self.log.append((fault.mode, method, path))
                    return fault
        return None

    # -- life ---------------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.heal()
            self._server.shutdown()
            self._server.server_close()
            with self._lock:
                open_connections = list(self._connections)
            for conn in open_connections:  # idle keep-alive connections end now, not at their time-out
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def signer(authorization: str | None, path: str) -> str | None:
    """The access key id an S3 request was signed with (SigV4 header or presigned query, SigV2
    header), None if it was sent unsigned."""
    m = re.search(r"Credential=([^/,\s]+)/", authorization or "") or re.search(
        r"[?&]X-Amz-Credential=([^/%&]+)(?:/|%2F)", path) or re.match(r"AWS ([^:\s]+):", authorization or "")
    if m:
        return m.group(1)
    return "(unparsed)" if authorization else None


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as object stores are spoken to
    timeout = CLIENT_IDLE_TIMEOUT

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args) -> None:  # quiet: counts are kept instead
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():  # trailers
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=UPSTREAM_TIMEOUT)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    def _wait_for_client(self, seconds: float) -> bool:
        """Sleep ``seconds``; False as soon as the client closes its connection (then the
        delayed request is dropped, as a request still in a slow network would be)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return False
                except OSError:
                    return False
                time.sleep(min(max(left, 0), 0.05))  # bytes waiting (not a close): keep waiting
        return True

    def _drop(self) -> None:
        """Close the client's connection now (an abortive close: the client sees a reset)."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _serve(self) -> None:
        body = self._body()
        with self.owner._lock:
            self.owner.signed.append((self.command, self.path, signer(self.headers.get("Authorization"), self.path)))
        fault = self.owner._choose(self.command, self.path)
        if fault is not None and fault.mode == "status":
            code, message = _S3_ERRORS[fault.status]
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                   f"<Message>{message}</Message><RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId>"
                   "</Error>").encode()
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(xml)
            return
        if fault is not None and fault.mode == "slow" and not self._wait_for_client(fault.delay_ms / 1000):
            return  # the client gave up meanwhile: the request never reaches the store
        try:
            status, reason, headers, data = self._forward(body)
        except OSError:
            self.send_error(502, "upstream unreachable")
            return
        with self.owner._lock:
            self.owner.forwarded.append((self.command, self.path, status))
        if fault is not None and fault.mode == "lose":
            self._drop()
            return
        head = [f"HTTP/1.1 {status} {reason}\r\n"]
        for k, v in headers:
            if k.lower() not in _HOP and not (k.lower() == "content-length" and self.command != "HEAD"):
                head.append(f"{k}: {v}\r\n")
        if self.command != "HEAD":
            head.append(f"Content-Length: {len(data)}\r\n")
        raw = "".join(head).encode("latin-1") + b"\r\n" + (data if self.command != "HEAD" else b"")
        if fault is not None and fault.mode == "cut":
            self.wfile.write(raw[: max(1, len(raw) // 2)])
            self.wfile.flush()
            self._drop()
            return
        self.wfile.write(raw)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=9100)
    a = p.parse_args()
    proxy = FaultProxy(a.upstream, a.port).start()
    print(f"fault proxy at {proxy.endpoint} -> {a.upstream} (healthy); Ctrl-C to stop")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
