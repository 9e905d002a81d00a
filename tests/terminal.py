"""A program in a pseudo-terminal of its own, for tests of what a user's Ctrl-C does
(spark-sql's prompt, beeline): the terminal is the program's controlling terminal, so the
interrupt character written to it (``^C``) signals the terminal's foreground process group,
as a user's Ctrl-C does."""
from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

CTRL_C = "\x03"


def _controlling_terminal() -> None:
    import fcntl
    import termios
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``args`` run in a new session whose controlling terminal is a pseudo-terminal; what it
    prints is read from the terminal's master side all the time (a program whose terminal is
    not read blocks once the terminal's buffer is full: spark-sql logs a lot)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                                        start_new_session=True, preexec_fn=_controlling_terminal)
        os.close(slave)
        self.output = ""
        self._read_to = 0
        self._more = threading.Condition()
        self._ended = False
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the program ended and its terminal closed
                chunk = b""
            with self._more:
                if chunk:
                    self.output += chunk.decode(errors="replace")
                else:
                    self._ended = True
                self._more.notify_all()
            if not chunk:
                return

    def read_until(self, pattern: str, timeout: float) -> str:
        """What it printed since the last call, up to where ``pattern`` (a regex) appears in it
        (bounded)."""
        deadline = time.monotonic() + timeout
        with self._more:
            while True:
                m = re.search(pattern, self.output[self._read_to:])
                if m:
                    said = self.output[self._read_to:self._read_to + m.end()]
                    self._read_to += m.end()
                    return said
                left = deadline - time.monotonic()
                if left <= 0 or self._ended:
                    raise AssertionError(f"no {pattern!r} within {timeout:.0f} s (exit code "
                                         f"{self.process.poll()}); it printed:\n{self.output[-4000:]}")
                self._more.wait(min(left, 0.5))

    def type(self, text: str) -> None:
        """Keys typed at the terminal (``CTRL_C``: the interrupt character)."""
        os.write(self.master, text.encode())

    def close(self, timeout: float = 60) -> None:
        """Wait for the program to end (bounded), then kill what is left of its session."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.wait(30)
        os.close(self.master)
