"""A second S3-compatible server for benchmarks: S3Proxy (Maven Central, ``org.gaul:s3proxy``)
with its in-memory store, on 127.0.0.1.

moto's server, the tests' store, serves about 120 listings a second on this machine's two
cores (one Python process; 2026-11-26, 16 threads through one client): a warehouse-wide dry
run over 200 tables is bound by it, whatever the client does. S3Proxy (Jetty, many threads)
served 1,380 the same way, so a benchmark on it measures the client more than the store. It does not enforce ``If-None-Match``
on PUT (moto does): a single writer is safe, concurrent commits are not, so it is for
benchmarks only; the tests keep moto.

The jar comes from Maven Central through ``mvn dependency:copy`` into ``.tools/`` (as
``bin/sbt``'s launcher does), the first time it is needed.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server  # noqa: E402

VERSION = "2.6.0"  # tested here: Lance 14's reads, writes and commits; boto3 with checksums when required
JAR = ROOT / ".tools" / f"s3proxy-{VERSION}-jar-with-dependencies.jar"


def _end_with_parent() -> None:
    """In the child: SIGTERM when the process that started it ends, even killed (a benchmark
    stopped by a test's timeout must not leave the store running)."""
    import ctypes
    import signal
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def jar() -> Path:
    if not JAR.exists():
        JAR.parent.mkdir(exist_ok=True)
        subprocess.run(["mvn", "-q", "dependency:copy",
                        f"-Dartifact=org.gaul:s3proxy:{VERSION}:jar:jar-with-dependencies",
                        f"-DoutputDirectory={JAR.parent}"], check=True, timeout=600)
    return JAR


class S3ProxyServer(S3Server):
    """S3Proxy's in-memory store on 127.0.0.1:<port>, started and stopped with bounded waits;
    the same keys, storage options and stop as the tests' moto server."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port, Path(tempfile.mkdtemp(prefix="s3proxy-")) / "s3proxy.log")

    def start(self, timeout: float = 60) -> "S3ProxyServer":
        conf = self.log.with_name("s3proxy.conf")
        conf.write_text("\n".join([
            f"s3proxy.endpoint={self.endpoint}", "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={ACCESS_KEY_ID}", f"s3proxy.credential={SECRET_ACCESS_KEY}",
            "jclouds.provider=transient", "jclouds.identity=local", "jclouds.credential=local", ""]))
        self.process = subprocess.Popen(["java", "-Xmx4g", "-jar", str(jar()), "--properties", str(conf)],
                                        stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                        preexec_fn=_end_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2)
            except urllib.error.HTTPError:  # 403 to an unsigned request: it is serving
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"S3Proxy did not start on {self.endpoint}; log: {self.log}")
                time.sleep(0.2)
            else:
                return self

    def create_bucket(self, name: str) -> str:
        """boto3 with checksums only where required (S3Proxy refuses the newer default headers)."""
        import boto3
        from botocore.config import Config
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
                     config=Config(request_checksum_calculation="when_required",
                                   response_checksum_validation="when_required")).create_bucket(Bucket=name)
        return f"s3://{name}"
