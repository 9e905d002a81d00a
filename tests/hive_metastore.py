"""A real Hive Metastore for the tests, on 127.0.0.1, with embedded Derby in a temporary folder.

    python tests/hive_metastore.py [--version 2|3] [--port 9083]   # the same server by hand

- Hive 2 (2.3): the metastore pyspark ships (its jars folder has hive-metastore 2.3, hive-exec,
  DataNucleus, Derby and libthrift): nothing to download.
- Hive 3 (3.1): `org.apache.hive:hive-standalone-metastore` and its dependencies, resolved once
  with Maven into .cache/ (hence the tests that use it are marked `network`).

HiveMetaStore's own main binds every interface, with no setting for the address, so the Thrift
service is served by tests/LoopbackMetastore.java (the same handler, on 127.0.0.1 only), run
as a single-file Java program. The schema is created by DataNucleus on first start
(`datanucleus.schema.autoCreateAll`). Started and stopped with bounded waits, as
tests/s3_server.py's server.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from xml.sax.saxutils import escape

from ports import free_port, serve_until_interrupted, stop_server

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = Path(__file__).with_name("LoopbackMetastore.java")
HIVE3 = "org.apache.hive:hive-standalone-metastore:3.1.3"
# Resolved jars are kept here between runs (as tests/test_lance_spark_interop.py's).
CACHE = Path(os.environ.get("LANCE_SPARK_INTEROP_CACHE") or ROOT / ".cache")
# The metastore's JVM: C1 only and a small heap (the tests' JVMs are C1 only too, conftest).
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx384m", "-Xss1m"]


def hive2_jars() -> Path:
    """pyspark's jars folder (Hive 2.3's metastore among them)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not list(jars.glob("hive-metastore-2.*.jar")):
        raise RuntimeError(f"no hive-metastore-2.*.jar in {jars}")
    return jars


def hive3_jars(timeout: float = 600) -> Path:
    """The standalone metastore 3.1 and its dependencies, resolved with Maven into .cache/
    (only the first call downloads). The error says Maven's own words when it fails."""
    jars = CACHE / ("hive-standalone-metastore-" + HIVE3.rsplit(":", 1)[1]) / "jars"
    done = jars.parent / "resolved"
    if done.exists():
        return jars
    group, artifact, version = HIVE3.split(":")
    jars.parent.mkdir(parents=True, exist_ok=True)
    # jdk.tools (a system-scope jar of Java 8's JDK, reached through hadoop-annotations) has no
    # artifact to resolve on Java 17.
    (jars.parent / "pom.xml").write_text(f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lance-compact.tests</groupId><artifactId>hive3-metastore</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies><dependency>
    <groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
    <exclusions><exclusion><groupId>jdk.tools</groupId><artifactId>jdk.tools</artifactId></exclusion></exclusions>
  </dependency></dependencies>
</project>
""")
    cmd = ["mvn", "-q", "-B", "-f", str(jars.parent / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={jars}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeError("mvn (Maven) is not on PATH: it resolves the Hive 3 metastore's jars") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Maven did not resolve {HIVE3} in {timeout:.0f} s") from None
    if p.returncode != 0:
        errors = [line for line in (p.stdout + p.stderr).splitlines() if "ERROR" in line]
        raise RuntimeError(f"Maven could not resolve {HIVE3} (exit {p.returncode}):\n" + "\n".join(errors[:10]))
    done.write_text(HIVE3 + "\n")
    return jars


def _site(settings: dict[str, str]) -> str:
    props = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                    for k, v in settings.items())
    return f"<configuration>\n{props}</configuration>\n"


class HiveMetastore:
    """A Hive Metastore (``version`` "2" or "3") on 127.0.0.1:<port>, its Derby database,
    warehouse folder, configuration and log in ``workdir``."""

    def __init__(self, version: str, workdir: Path, port: int | None = None) -> None:
        if version not in ("2", "3"):
            raise ValueError(f"Hive Metastore version {version!r}: expected '2' or '3'")
        self.version = version
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.log = self.workdir / "metastore.log"
        self.process: subprocess.Popen | None = None

    def _configure(self) -> Path:
        conf = self.workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.workdir / 'derby'};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": (self.workdir / "warehouse").as_uri(),
        }
        if self.version == "3":
            # the standalone metastore's defaults name classes that live in hive-exec
            settings.update({
                "metastore.schema.verification": "false",
                "metastore.warehouse.dir": (self.workdir / "warehouse").as_uri(),
                "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
                "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
            })
        for name in ("hive-site.xml", "metastore-site.xml"):
            (conf / name).write_text(_site(settings))
        return conf

    def start(self, timeout: float = 240) -> "HiveMetastore":
        jars = hive2_jars() if self.version == "2" else hive3_jars()
        conf = self._configure()
        java = shutil.which("java")
        if not java:
            raise RuntimeError("java is not on PATH: the Hive Metastore is a Java program")
        cmd = [java, *JVM_FLAGS, f"-Dderby.system.home={self.workdir}",
               f"-Dderby.stream.error.file={self.workdir / 'derby.log'}", f"-Djava.io.tmpdir={self.workdir}",
               "-cp", f"{conf}{os.pathsep}{jars}/*", str(LAUNCHER), str(self.port)]
        env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "HIVE_CONF_DIR", "CLASSPATH")}
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, env=env)
        deadline = time.monotonic() + timeout
        while True:
            if "LOOPBACK_METASTORE_SERVING" in self.log.read_text(errors="replace") and self._answers():
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                why = "exited" if self.process.poll() is not None else f"did not answer in {timeout:.0f} s"
                self.stop()
                raise RuntimeError(f"Hive Metastore {self.version} {why} on {self.uri}:\n{self._tail()}")
            time.sleep(0.3)

    def _answers(self) -> bool:
        """Whether the Thrift service lists its databases (the schema is there)."""
        from hive_metastore_client import HiveMetastoreClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                pass
            client = HiveMetastoreClient("127.0.0.1", self.port)
            client.open()
            try:
                return "default" in client.get_all_databases()
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - not up yet: asked again until the deadline
            return False

    def _tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        useful = [line for line in text if not line.lstrip().startswith("at ")]
        return "\n".join(useful[-lines:])

    def stop(self) -> None:
        stop_server(self.process)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", choices=("2", "3"), default="2")
    p.add_argument("--port", type=int, default=9083)
    a = p.parse_args()
    server = HiveMetastore(a.version, Path(tempfile.mkdtemp(prefix="hive-metastore-")), a.port).start()
    print(f"Hive Metastore {a.version} at {server.uri} (folder {server.workdir})")
    print(f"  --conf spark.sql.catalog.lance.impl=hive{a.version} --conf spark.sql.catalog.lance.uri={server.uri}")
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main())
