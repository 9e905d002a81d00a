"""Free TCP ports on the loopback address for the servers the tests start, and the one way
such a server's process is stopped."""
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(process: subprocess.Popen | None, timeout: float = 20) -> None:
    """Terminate a server the tests started, then kill it if it has not ended within ``timeout``."""
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def serve_until_interrupted(server) -> int:
    """A server's command line (``python tests/<server>.py``): wait for its process; Ctrl-C stops it."""
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0
