"""A TCP proxy that delays every HTTP request by a fixed time, as an object store's round trip
does, without parsing HTTP and without becoming the bottleneck itself.

The tests' fault proxy (tests/fault_proxy.py) parses and re-sends every request from a thread
of its own over a new upstream connection. Measured here (2026-11-26, listings of one small
folder from 16 threads through one client, S3Proxy behind): S3Proxy alone 1,380 requests a
second, behind this proxy (no delay) 1,290, behind the fault proxy 640. This one runs on one
asyncio loop: per client connection it opens one upstream connection and pumps
bytes both ways; the first bytes a client sends after the upstream last answered (a new
request: object_store's HTTP/1.1 client does not pipeline) wait ``delay_ms`` first. Those
waits are counted: :attr:`requests`; with ``log`` a list, each request's first line and Range
header are appended to it (``"GET /bucket/key bytes=0-99"``: which reads a step makes). 127.0.0.1
only; :meth:`stop` ends it.
"""
from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ports import free_port  # noqa: E402

_CHUNK = 1 << 16


def _request_line(data: bytes) -> str:
    """A request's method and path, and its Range header if any (from its first bytes)."""
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    line = " ".join(head[0].split(" ")[:2])
    ranges = [h.split(":", 1)[1].strip() for h in head[1:] if h.lower().startswith("range:")]
    return line + (f" {ranges[0]}" if ranges else "")


class LatencyProxy:
    def __init__(self, upstream: str, delay_ms: float, log: list[str] | None = None) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.delay = delay_ms / 1000
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.requests = 0
        self.log = log
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 10)
        except (OSError, asyncio.TimeoutError):
            client_w.close()
            return
        answered = [True]  # a request may start: the upstream answered the last one (or none was sent)

        async def to_upstream() -> None:
            while data := await client_r.read(_CHUNK):
                if answered[0]:
                    answered[0] = False
                    self.requests += 1
                    if self.log is not None:
                        self.log.append(_request_line(data))
                    await asyncio.sleep(self.delay)
                up_w.write(data)
                await up_w.drain()

        async def to_client() -> None:
            while data := await up_r.read(_CHUNK):
                answered[0] = True
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.ensure_future(to_upstream()), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (Exception, asyncio.CancelledError):  # stop(): the connection ends quietly
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in (up_w, client_w):
                w.close()

    def start(self) -> "LatencyProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=256), self._loop).result(10)
        return self

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0)  # the connections' own callbacks run before the loop stops

    def stop(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "LatencyProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
