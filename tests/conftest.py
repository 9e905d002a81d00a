"""One real local Spark session per test module, with the lance catalog over a temporary
warehouse. No mocks: real Spark, real Lance datasets on disk."""
from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# Every Spark driver these tests start (PySpark here, spark-sql and servers as subprocesses)
# inherits this: their engines accept the test_* fault hooks. tests/test_shared_server.py
# starts drivers without it.
os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
# The tests' class-data archive (class_archive_for_tests.py, made by bin/test first).
import class_archive_for_tests  # noqa: E402  (tests/ is on the path: pytest's rootdir)

TEST_CLASS_ARCHIVE = class_archive_for_tests.java_options()


def test_jvm_environment() -> None:
    """What every JVM the tests start gets, set under pytest only (pytest_configure): the
    benchmarks import this module for its sessions but time the JVM as it is deployed.

    * spark-submit's JVMs (each module's PySpark driver, spark-sql, the Thrift and Connect
      servers, the service) compile with C1 only: a test JVM lives minutes, and C2's compiler
      threads took half of its CPU on this 2-core machine that runs three modules at once
      (measured: one session's JVM 24.3 s -> 12.6 s of CPU for the same statements);
    * they map the tests' class-data archive: the Spark classes each would otherwise load and
      verify again;
    * lance-spark-sql's own archive (runtime/class_archive.py) is off: the first run of each
      JVM and jar set dumps one at its exit (seconds), which tests that time an exit would meet
      at random. test_cli's tests of it turn it on with a cache of their own."""
    if "TieredStopAtLevel" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
            filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), "-XX:TieredStopAtLevel=1"]))
    if TEST_CLASS_ARCHIVE and "SharedArchiveFile" not in os.environ["SPARK_SUBMIT_OPTS"]:
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join([os.environ["SPARK_SUBMIT_OPTS"], *TEST_CLASS_ARCHIVE])
    os.environ.setdefault("LANCE_COMPACT_CLASS_ARCHIVE", "false")


def without_test_class_archive(env: dict) -> dict:
    """``env`` whose SPARK_SUBMIT_OPTS does not map the tests' archive (for tests of
    lance-spark-sql's own, which stands aside for an archive of the user's)."""
    opts = [o for o in env.get("SPARK_SUBMIT_OPTS", "").split() if o not in TEST_CLASS_ARCHIVE]
    return {**env, "SPARK_SUBMIT_OPTS": " ".join(opts)}


# The example strategy (examples/my_planners.py), registered as the catalog's operator would.
STRATEGIES = {"skip_newest": "my_planners.SkipNewest"}
# The operator's floor for cleanup's removal of unreferenced files lowered to nothing, for the
# modules whose tests remove orphans seconds old (no writer works on their tables then); SQL
# cannot lower it (docs/maintenance-cleanup.md). A module sets SPARK_CONF = NO_CLEANUP_FLOOR.
CLEANUP_FLOOR_KEY = "spark.lance.compact.cleanup.unverifiedMinAge"
# The operator's version floor (no cleanup removes a version younger than it, default 7 days)
# switched off ('0s', as Delta's retentionDurationCheck.enabled=false), for the modules whose
# tests remove versions seconds old. NO_CLEANUP_FLOOR lowers both floors.
VERSION_FLOOR_KEY = "spark.lance.compact.cleanup.versionMinAge"
NO_VERSION_FLOOR = {VERSION_FLOOR_KEY: "0s"}
NO_CLEANUP_FLOOR = {CLEANUP_FLOOR_KEY: "0 seconds", **NO_VERSION_FLOOR}


def pytest_configure(config):
    """Modules collected longest first (bin/test runs them side by side) and each module's time
    in the summary: tests/scheduling.py."""
    import scheduling

    test_jvm_environment()
    scheduling.configure(config)


@contextmanager
def engine_settings(settings: dict):
    """The operator's driver settings as the engine's code in this process reads them
    (runtime/driver_conf, as an engine loads them at start), for tests that call it directly;
    none again afterwards."""
    from lance_compact.runtime import driver_conf

    driver_conf.load(list(settings.items()))
    try:
        yield
    finally:
        driver_conf.load([])


@pytest.fixture
def no_version_floor():
    """The version-retention check off for the engine code a test calls in this process (as
    an operator's versionMinAge=0s), for tests that clean up versions seconds old."""
    with engine_settings(NO_VERSION_FLOOR):
        yield


@pytest.fixture(scope="session", autouse=True)
def writer_state(tmp_path_factory):
    """Where the concurrent-writer hooks (tests/writers.py) keep their state during this run;
    the engine processes inherit it."""
    os.environ["LANCE_COMPACT_TEST_STATE"] = str(tmp_path_factory.mktemp("writers"))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("warehouse")
    (wh / "db").mkdir()
    return wh


def spark_environment() -> None:
    """What a test module's Spark driver and its Python workers need in their environment:
    local addresses only, this Python, and on their path the example strategy
    (examples/my_planners.py) and the tests' concurrent-writer hooks (tests/writers.py)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT / "examples"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")] if p)


def lance_session(master: str, app: str, warehouse: str, conf: dict | None = None, **configure):
    """A local Spark session with the lance catalog over ``warehouse`` (no UI, logs at ERROR);
    ``conf``: more Spark settings; ``configure``: configure_spark_with_lance_compact's."""
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    spark_environment()
    # The JVM outlives a module's session on an xdist worker, and the first session's settings
    # became its system properties (PySpark passes them to spark-submit), which every later
    # SparkContext reads: a module would get an earlier one's operator settings (a lowered
    # cleanup floor) wherever it sets none itself. Ours are cleared; the session sets its own.
    from pyspark import SparkContext
    if SparkContext._jvm is not None:
        system = SparkContext._jvm.java.lang.System
        for key in list(system.getProperties().stringPropertyNames().toArray()):
            if str(key).startswith("spark.lance.compact."):
                system.clearProperty(key)
    # A builder of its own: PySpark's SparkSession.builder is one object per process whose options
    # pile up, so a module run after another on the same worker would inherit its settings (a
    # lowered cleanup floor, say) wherever it sets none itself.
    builder = SparkSession.Builder().master(master).appName(app).config("spark.ui.enabled", "false")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    # The JVM reads $PYSPARK_SUBMIT_ARGS once, at its start; the private properties file
    # configure_spark_with_lance_compact may name there must not reach the processes later
    # tests start (a service's own --properties-file once lost to it).
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    session = configure_spark_with_lance_compact(builder, warehouse=warehouse, **configure).getOrCreate()
    if submit_args is None:
        os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
    else:
        os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
    session.sparkContext.setLogLevel("ERROR")
    return session


def logged_session(warehouse, tmp_path_factory, app: str, conf: dict):
    """A local[2] session whose engine workers log to a file of the test's (``session.engine_log``),
    with ``conf`` (for a module's own ``spark`` fixture)."""
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    session = lance_session("local[2]", app, str(warehouse),
                            {"spark.sql.shuffle.partitions": "2", "spark.lance.compact.engine.log": str(log), **conf})
    session.engine_log = log
    return session


@pytest.fixture(scope="module")
def spark(warehouse, request):
    """A module may set SPARK_MASTER (e.g. local[2,3] to give tasks 3 attempts) and SPARK_CONF
    (more static settings, e.g. NO_CLEANUP_FLOOR)."""
    session = lance_session(getattr(request.module, "SPARK_MASTER", "local[2]"), "lance-compact-tests",
                            str(warehouse), {"spark.sql.shuffle.partitions": "2",
                                             **getattr(request.module, "SPARK_CONF", {})},
                            strategies=STRATEGIES,
                            picture_dir=str(warehouse.parent))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3-compatible server (moto's) on 127.0.0.1 for the whole run."""
    from s3_server import S3Server

    server = S3Server(log=tmp_path_factory.mktemp("s3") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def fresh_table(warehouse, request):
    """A degraded table db.<test name> in the warehouse; returns (identifier, path)."""
    from oracle import degraded_table

    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:60]
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path))
    return f"db.{name}", path


def degraded_table_for(warehouse, request, fragments: int, rows_per_fragment: int = 40):
    """A fresh degraded table db.<name> for this test (name unique per test and parameter:
    the writer hooks keep state per table); returns (identifier, path)."""
    import hashlib
    import re

    from oracle import degraded_table

    digest = hashlib.sha1(request.node.name.encode()).hexdigest()[:8]
    name = re.sub(r"\W+", "_", request.node.name)[:40] + "_" + digest
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path), fragments=fragments, rows_per_fragment=rows_per_fragment)
    return f"db.{name}", path


def compact_call(spark, table: str, args: str = ""):
    """``CALL lance.compact(table, target 300, args)``: its result row."""
    return spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300"
                     + (f", {args}" if args else "") + ")").collect()[0]


@contextmanager
def refused(path, match: str):
    """The statement in the block fails with an error matching ``match``, and the Lance
    table at ``path`` keeps its version."""
    import lance

    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=match) as e:
        yield e
    assert lance.dataset(str(path)).version == version


def wait_for(what, timeout: float = 120, step: float = 0.2):
    """``what()``'s first truthy value, polled every ``step`` seconds for at most ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(step)


def jobs_described(spark, prefix: str) -> list[str]:
    """Descriptions of the application's jobs that start with ``prefix`` (Spark's status store:
    what the UI's Jobs page lists)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    out = []
    for i in range(jobs.size()):
        d = jobs.apply(i).description().toString()  # Some(<text>) or None
        if d.startswith("Some(") and d[5:-1].startswith(prefix):
            out.append(d[5:-1])
    return out


@pytest.fixture()
def opens(monkeypatch):
    """How many times the test's code opens a table (``lance.dataset``): ``opens["n"]``."""
    import lance

    count = {"n": 0}
    real = lance.dataset

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(lance, "dataset", counting)
    return count
