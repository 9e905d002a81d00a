"""A catalog service that vends what a test tells it to, and a listener that records whatever
reaches it: the attack of issue 41 (a REST namespace answering DescribeTable with another
endpoint and ``allow_http=true``), on 127.0.0.1.

- :class:`VendingProxy`: an HTTP proxy in front of a real Lance REST namespace (pylance's
  ``RestAdapter``); every answer is forwarded unchanged except DescribeTable's, whose
  ``storage_options`` get :attr:`VendingProxy.vend` laid over them, or replaced by it
  (switchable at run time).
  To its client it is the catalog service.
- :class:`Listener`: a plain TCP server that accepts any connection and records the bytes it
  receives (the first 64 KiB of each); it answers nothing. A request that reaches it (an object
  store's signed GET, a proxy CONNECT) is in :attr:`Listener.received`.

Threads are daemons, sockets and waits bounded; ``stop()`` ends each.
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_DESCRIBE = re.compile(r"^/v1/table/[^/]+/describe")
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class VendingProxy:
    """``start()``; point the catalog's ``uri`` at :attr:`endpoint`; set :attr:`vend`."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname == "127.0.0.1", "the proxy forwards to the loopback address only"
        self.upstream = (parts.hostname, parts.port)
        self.vend: dict[str, str] = {}
        self.replace = False
        self.describes = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def set(self, vend: dict[str, str], replace: bool = False) -> None:
        """From now on, lay ``vend`` over every DescribeTable answer's storage options (or with
        ``replace``, answer with ``vend`` as its storage options)."""
        with self._lock:
            self.vend, self.replace = dict(vend), replace

    def start(self) -> "VendingProxy":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60

            def log_message(self, *args) -> None:
                pass

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(*owner.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    status, data, out = resp.status, resp.read(), resp.getheaders()
                finally:
                    conn.close()
                if status == 200 and _DESCRIBE.search(self.path):
                    with owner._lock:
                        owner.describes += 1
                        vend, replace = dict(owner.vend), owner.replace
                    if vend or replace:
                        answer = json.loads(data)
                        answer["storage_options"] = {**({} if replace else answer.get("storage_options") or {}), **vend}
                        data = json.dumps(answer).encode()
                self.send_response(status)
                for k, v in out:
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and the bytes sent on it."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with owner._lock:
                    owner.connections += 1
                self.request.settimeout(2)
                data = b""
                try:
                    while len(data) < 65536:
                        chunk = self.request.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except (socket.timeout, OSError):
                    pass
                with owner._lock:
                    owner.received.append(data)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def heard(self) -> list[bytes]:
        """What reached it so far (one entry per connection; empty bytes: a connection that sent
        nothing)."""
        with self._lock:
            return list(self.received) + [b""] * (self.connections - len(self.received))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
