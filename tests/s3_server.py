"""A real S3-compatible server for the tests: moto's standalone server on 127.0.0.1.

    python tests/s3_server.py [--port 9000]    # the same server by hand, until Ctrl-C

It is infrastructure, like the Spark master the cluster tests start: Lance talks to it over
HTTP with the storage options below, exactly as it would to S3.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ports import free_port, serve_until_interrupted, stop_server

# Planted credentials: the tests grep every log, plan, error and event log for these.
ACCESS_KEY_ID = "AKIAPLANTEDKEYID7Q3X"
SECRET_ACCESS_KEY = "planted-secret-Zq8wX4vB2nM6"


class S3Server:
    """moto_server on 127.0.0.1:<port>, started and stopped with bounded waits."""

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def storage_options(self) -> dict[str, str]:
        """Lance storage options for this server."""
        return {"aws_endpoint": self.endpoint, "allow_http": "true", "aws_region": "us-east-1",
                "aws_access_key_id": ACCESS_KEY_ID, "aws_secret_access_key": SECRET_ACCESS_KEY}

    def start(self, timeout: float = 60) -> "S3Server":
        exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or "moto_server"
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).read()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start on {self.endpoint}"
                                       + (f"; log: {self.log}" if self.log else ""))
                time.sleep(0.2)

    def fresh_bucket(self, prefix: str) -> str:
        """A new bucket named after ``prefix``, this process and the time: ``s3://<bucket>``."""
        import os
        import time
        return self.create_bucket(f"{prefix}-{os.getpid()}-{int(time.time() * 1000) % 10**9}")

    def create_bucket(self, name: str) -> str:
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=ACCESS_KEY_ID,
                     aws_secret_access_key=SECRET_ACCESS_KEY).create_bucket(Bucket=name)
        return f"s3://{name}"

    def stop(self) -> None:
        stop_server(self.process)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--bucket", default="warehouse")
    a = p.parse_args()
    server = S3Server(a.port).start()
    print(f"S3-compatible server at {server.endpoint}, bucket {server.create_bucket(a.bucket)}")
    for k, v in server.storage_options.items():
        print(f"  --conf spark.sql.catalog.lance.storage.{k}={v}")
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main())
