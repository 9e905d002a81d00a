"""Spark servers and clients for tests/test_clients.py, all from the pip-installed pyspark:
a Spark Connect server, the Thrift (JDBC/ODBC) server, beeline, spark-submit and the Scala
compiler that ships in Spark's jars folder.

Every process binds 127.0.0.1 only, runs in a temporary folder (so no metastore_db, derby.log
or spark-warehouse lands in the checkout) and logs to a file there; a server is started with a
bounded wait for its port and stopped with terminate, then kill after a bounded wait.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator, Sequence

from lance_compact.api import CATALOG_CLASS, PLUGIN_CLASS, jar_path
from ports import free_port
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


def spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of every Spark process here: the installed pyspark's Spark, this
    Python for the driver's engine and the executors, loopback only. A PySpark gateway or a
    Spark Connect mode of this test process is not passed on."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_GATEWAY") and k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env.update(SPARK_HOME=spark_home(), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.update(extra)
    # beeline's JVM compiles with C1 only, as the drivers do (conftest's SPARK_SUBMIT_OPTS, which
    # spark-class does not pass to beeline): a client that lives seconds; measured 2.5 -> 1.6 s of
    # CPU a run, and the suite runs beeline about 60 times
    beeline_opts = env.get("SPARK_BEELINE_OPTS", "")
    if "TieredStopAtLevel" not in beeline_opts:
        env["SPARK_BEELINE_OPTS"] = " ".join(filter(None, ["-XX:TieredStopAtLevel=1", beeline_opts]))
    return env


def catalog_args(warehouse: Path | str, engine_log: Path | None = None) -> list[str]:
    """spark-submit options for the lance catalog, as the README gives them."""
    conf = {"spark.sql.catalog.lance": CATALOG_CLASS,
            "spark.sql.catalog.lance.warehouse": str(warehouse),
            "spark.sql.execution.pyspark.python": sys.executable,
            "spark.plugins": PLUGIN_CLASS}
    if engine_log:
        conf["spark.lance.compact.engine.log"] = str(engine_log)
    return ["--jars", jar_path()] + [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]


def local_args(workdir: Path) -> list[str]:
    """Local mode on the loopback address, no UI, Spark's own warehouse in ``workdir``."""
    return ["--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.sql.warehouse.dir={workdir / 'spark-warehouse'}"]


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return f"({path}: {e})"
    return f"--- last {min(lines, len(text))} lines of {path} ---\n" + "\n".join(text[-lines:])


class SparkServer:
    """A Spark server process (spark-submit ... spark-internal) listening on 127.0.0.1:port."""

    def __init__(self, name: str, args: Sequence[str], port: int, workdir: Path,
                 env: dict[str, str] | None = None, extra_logs: Sequence[Path] = ()) -> None:
        self.name, self.args, self.port, self.workdir = name, list(args), port, workdir
        self.env = env or spark_env()
        self.log = workdir / f"{name}.log"
        self.extra_logs = list(extra_logs)
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    def start(self, timeout: float = 240) -> "SparkServer":
        t0 = time.monotonic()
        with open(self.log, "w") as out, warnings.catch_warnings():
            # pylance warns on every fork; the child here only sets its parent-death signal and
            # execs spark-submit.
            warnings.filterwarnings("ignore", "lance is not fork-safe")
            # Its own session: the server's children (the engine, Python workers) can be ended
            # with it by the group id if they outlive it.
            self.process = subprocess.Popen(self.args, cwd=self.workdir, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_end_with_parent)
        deadline = t0 + timeout
        while True:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode} "
                                   f"before listening on 127.0.0.1:{self.port}\n{self.logs()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.name} did not listen on 127.0.0.1:{self.port} within "
                                   f"{timeout:.0f} s\n{self.logs()}")
            time.sleep(0.5)
        self.startup_seconds = time.monotonic() - t0
        print(f"{self.name} listening on 127.0.0.1:{self.port} after {self.startup_seconds:.1f} s")
        return self

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (Spark's shutdown hooks stop the SparkContext and so the engine), SIGKILL to
        the server's process group after ``timeout``; then whatever of the group is left."""
        p = self.process
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"{self.name} did not stop within {timeout:.0f} s of SIGTERM: killed")
                _killpg(p.pid)
                p.wait(timeout=timeout)
        deadline = time.monotonic() + 10  # the engine and the Python workers end with the JVM
        while _group_alive(p.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(p.pid):
            print(f"processes of {self.name} outlived it: killed")
            _killpg(p.pid)

    def logs(self, lines: int = 60) -> str:
        return "\n".join(tail(f, lines) for f in [self.log, *self.extra_logs] if Path(f).exists())

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Print the tails of the server's logs when the block fails (pytest shows them)."""
        try:
            yield
        except BaseException:
            print(self.logs(), file=sys.stderr)
            raise


def _pdeathsig_setter():
    """A function for the child before exec (Linux): SIGTERM when the test process dies, so a
    pytest killed by a time-out leaves no server behind (spark-submit execs the JVM, which keeps
    the setting). Looked up here, in the parent: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


_end_with_parent = _pdeathsig_setter()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def served(tmp_path_factory, name: str, make) -> Iterator[tuple["SparkServer", Path]]:
    """For a module's fixture: a server made by ``make(warehouse, workdir)`` over a fresh
    warehouse (with a ``db`` namespace folder), started, and stopped however the module ends;
    yields (server, warehouse)."""
    workdir = tmp_path_factory.mktemp(name)
    wh = workdir / "wh"
    (wh / "db").mkdir(parents=True)
    server = make(wh, workdir).start()
    try:
        yield server, wh
    finally:
        server.stop()


@contextlib.contextmanager
def remote_session(port: int) -> Iterator[object]:
    """The PySpark Connect client's session on 127.0.0.1:``port``. pyspark marks the whole
    process as a Connect client when it makes one; that is undone afterwards for the modules
    that follow."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def connect_server(warehouse: Path, workdir: Path, extra: Sequence[str] = ()) -> SparkServer:
    """A Spark Connect server with the lance catalog (pyspark's package has no
    sbin/start-connect-server.sh: it is spark-submit with the server's class). ``extra``: more
    spark-submit options."""
    port = free_port()
    home = spark_home()
    engine_log = workdir / "connect-engine.log"
    args = [os.path.join(home, "bin", "spark-submit"), "--class", CONNECT_SERVER_CLASS,
            *local_args(workdir), *catalog_args(warehouse, engine_log),
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            # the operator's: the notebook cleans up versions seconds old (version-retention check off)
            "--conf", "spark.lance.compact.cleanup.versionMinAge=0s",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            *extra, "spark-internal"]
    return SparkServer("connect-server", args, port, workdir, extra_logs=[engine_log])


def thrift_server(warehouse: Path, workdir: Path, extra: Sequence[str] = (),
                  env: dict[str, str] | None = None) -> SparkServer:
    """The Thrift JDBC/ODBC server with the lance catalog; its Hive metastore is an in-memory
    Derby database (the lance catalog does not use it). ``extra``: more spark-submit options;
    ``env``: the server's environment (default :func:`spark_env`)."""
    port = free_port()
    home = spark_home()
    engine_log = workdir / "thrift-engine.log"
    (workdir / "scratch").mkdir(exist_ok=True)  # Hive lists it when a session closes
    args = [os.path.join(home, "bin", "spark-submit"), "--class", THRIFT_SERVER_CLASS,
            *local_args(workdir), *catalog_args(warehouse, engine_log),
            "--conf", "spark.hadoop.javax.jdo.option.ConnectionURL="
                      "jdbc:derby:memory:lance_compact_thrift;create=true",
            "--driver-java-options", "-Dderby.stream.error.file=/dev/null",
            "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1",
            "--hiveconf", f"hive.server2.thrift.port={port}",
            "--hiveconf", f"hive.server2.logging.operation.log.location={workdir / 'operation_logs'}",
            "--hiveconf", f"hive.exec.local.scratchdir={workdir / 'scratch'}",
            "--hiveconf", f"hive.downloaded.resources.dir={workdir / 'resources'}",
            *extra, "spark-internal"]
    return SparkServer("thrift-server", args, port, workdir, env=env, extra_logs=[engine_log])


def beeline(port: int, sql: str, workdir: Path, *options: str,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``beeline -u jdbc:hive2://127.0.0.1:<port> -e <sql>`` with tab-separated output; its
    history file goes to ``workdir`` rather than ~/.beeline."""
    env = spark_env(SPARK_BEELINE_OPTS=f"-Duser.home={workdir}")
    return subprocess.run(
        [os.path.join(spark_home(), "bin", "beeline"), "-u", f"jdbc:hive2://127.0.0.1:{port}",
         "--outputformat=tsv2", *options, "-e", sql],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not exe or not os.path.exists(exe):
        raise RuntimeError("no java: set JAVA_HOME or put java on PATH")
    return exe


def compile_scala(sources: Sequence[Path], out_jar: Path, timeout: float = 300) -> None:
    """Compile Scala sources into a jar with the Scala compiler in Spark's jars folder,
    against Spark's jars."""
    jars = os.path.join(spark_home(), "jars", "*")
    p = subprocess.run([java(), "-cp", jars, "scala.tools.nsc.Main", "-usejavacp", "-deprecation",
                        "-feature", "-Werror", "-d", str(out_jar), *map(str, sources)],
                       capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if p.returncode != 0 or not out_jar.is_file():
        raise RuntimeError(f"scalac failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def spark_submit(args: Sequence[str], workdir: Path, log: Path,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """spark-submit in ``workdir``; stderr (Spark's log) to ``log``, stdout returned."""
    with open(log, "w") as err:
        return subprocess.run([os.path.join(spark_home(), "bin", "spark-submit"), *args],
                              cwd=workdir, env=spark_env(), stdout=subprocess.PIPE, stderr=err,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
