"""A real browser for the tests: headless Chromium (Debian's ``chromium`` package; ``bin/setup``
installs it) driven over the DevTools protocol, with the standard library only (a WebSocket
client of the protocol's one connection). It loads a page, waits for its load event, and keeps
what a person would see in the browser's console: uncaught exceptions, ``console.error`` and
the browser's own errors (a script or style that failed to load).

    with Browser() as b:
        page = b.load("http://127.0.0.1:4040/lance/")
        assert not page.errors
        b.evaluate("document.title")
        b.screenshot("out.png")
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field


def chromium() -> str | None:
    """The Chromium executable, if installed."""
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


class _WebSocket:
    """A client WebSocket (RFC 6455) for text messages: frames masked as a client must."""

    def __init__(self, url: str, timeout: float) -> None:
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"no WebSocket upgrade: {head[:200]!r}")

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the browser closed the connection")
            out += chunk
        return bytes(out)

    def send(self, text: str) -> None:
        payload = text.encode()
        n = len(payload)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self) -> str:
        message = bytearray()
        while True:
            b0, b1 = self._exactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exactly(8))[0]
            data = self._exactly(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the connection")
            if opcode in (0x9, 0xA):  # ping, pong: not part of a message
                continue
            message += data
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Page:
    url: str
    load_seconds: float            # navigation to the load event, as the test saw it
    errors: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium with one page (a tab), for a test module."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 60) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed (bin/setup installs Debian's package)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="lance-browser-")
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--disable-extensions", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._port()
        # its later log lines drained, so a full pipe never blocks it
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            pages = [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
                     if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"], timeout)
        self.ids = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _port(self) -> int:
        """The DevTools port Chromium chose, from the line it prints when it listens."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                return int(m.group(1))
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("chromium did not start its DevTools server")

    def call(self, method: str, **params) -> dict:
        """A DevTools command's result; events that arrive meanwhile are kept."""
        self.ids += 1
        mine = self.ids
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def _next_event(self) -> dict:
        message = json.loads(self.ws.recv())
        if "method" in message:
            self.events.append(message)
        return message

    def load(self, url: str) -> Page:
        """Navigate to ``url`` and wait for its load event; the console's errors meanwhile."""
        return self._navigation(url, lambda: self.call("Page.navigate", url=url))

    def submit(self, form_selector: str) -> Page:
        """Submit the page's form as its button would (a confirm dialog aside) and wait for the
        page it leads to."""
        return self._navigation(form_selector, lambda: self.evaluate(
            f"document.querySelector({json.dumps(form_selector)}).submit()"))

    def _navigation(self, what: str, start) -> Page:
        self.events.clear()
        started = time.monotonic()
        start()
        deadline = started + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not load within {self.timeout} s")
            self._next_event()
        page = Page(what, time.monotonic() - started)
        self.evaluate("0")  # events the page raised while loading arrive before this answer
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                page.errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                page.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                page.errors.append(f"{p['entry'].get('text')} ({p['entry'].get('url', '')})")
        return page

    def evaluate(self, expression: str):
        """A JavaScript expression's value in the page (JSON-able)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def table(self, selector: str) -> list[dict[str, str]]:
        """A table's rows as the page shows them: header text -> cell text."""
        return self.evaluate(rf"""(() => {{
            const t = document.querySelector({json.dumps(selector)});
            if (!t) return null;
            const heads = [...t.tHead.rows[0].cells].map(c => c.textContent.trim());
            return [...t.tBodies[0].rows].map(r => Object.fromEntries(
                [...r.cells].map((c, i) => [heads[i], c.textContent.replace(/\s+/g, " ").trim()])));
        }})()""")

    def screenshot(self, path: str, full_page: bool = True, max_height: int = 2400) -> None:
        """The page as a PNG (the whole page down to ``max_height`` pixels)."""
        params = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": min(size["height"], max_height), "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
