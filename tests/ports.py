"""Free TCP ports on the loopback address for the servers the tests start, and the one way
such a server's process is stopped."""
import random
import socket
import subprocess

# Below the kernel's ephemeral range: a port taken from that range (bind to 0) can be handed to
# an outgoing connection of any process before the server binds it, which happened to a Hive
# Metastore whose port was chosen minutes before it started ("Address already in use").
LOWEST = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port no process listens on now, outside the ephemeral range where there is room (random:
    test workers started at once seldom pick the same), else one the kernel picks."""
    high = _ephemeral_low()
    if high - LOWEST >= 1_000:
        for _ in range(50):
            port = random.randrange(LOWEST, high)
            if _free(port):
                return port
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
