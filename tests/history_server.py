"""A Spark history server for the tests and the Lance tab's benchmark: started over an event log
folder with the product's jar on its class path (as docs/lance-tab.md tells an operator), on a
free local port, its log in ``work``; stopped (its process group) on leaving the block."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAR = ROOT / "spark-ext" / "target" / "lance-spark-compact.jar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def history_server(events: Path, work: Path):
    """Yields the server's base URL (``http://127.0.0.1:<port>``)."""
    port = free_port()
    env = {**os.environ, "SPARK_DAEMON_CLASSPATH": str(JAR),
           "SPARK_HISTORY_OPTS": f"-Dspark.history.fs.logDirectory=file:{events} -Dspark.history.ui.port={port} "
                                 "-Dspark.history.fs.update.interval=1s"}
    spark_class = Path(os.environ["SPARK_HOME"]) / "bin" / "spark-class"
    with open(work / "history-server.log", "w") as log:
        server = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.history.HistoryServer"], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            os.killpg(server.pid, 15)
            server.wait(30)


def lists(base: str, app: str) -> bool:
    """Whether the server lists application ``app`` (running or finished)."""
    try:
        return any(a["id"] == app for a in json.load(urllib.request.urlopen(f"{base}/api/v1/applications", timeout=5)))
    except OSError:
        return False
