"""The engine answers every statement: a Lance panic, a SystemExit or KeyboardInterrupt raised
while serving, or a serving thread that ends without answering fails that statement with a
named error within a bound, and the engine goes on serving; its log is redacted of the
operator's secrets and of a request's own secrets only while that request is served."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import lance
import pytest

from conftest import ROOT, lance_session
from oracle import degraded_table

OPERATOR_SECRET = f"op-secret-{uuid.uuid4().hex}"
BOUND_S = 60


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory):
    return tmp_path_factory.mktemp("engine-log") / "engine.log"


@pytest.fixture(scope="module")
def spark(warehouse, engine_log):
    # The operator's static configuration holds a secret-named storage option; a heartbeat
    # timeout of 10 s makes the engine beat every 2 s.
    session = lance_session("local[2]", "engine-robustness", str(warehouse), {
        "spark.lance.compact.engine.log": str(engine_log),
        "spark.lance.compact.engine.heartbeatTimeout": "10s",
        "spark.sql.catalog.lance.storage.my_session_token": OPERATOR_SECRET})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def table(warehouse):
    path = warehouse / "db" / "robust.lance"
    degraded_table(str(path))
    return "db.robust", path


def _engine_pids(engine_log) -> list[str]:
    return re.findall(r"engine ready \(pid (\d+)\)", engine_log.read_text())


def _answers(spark, table) -> None:
    """A trivial statement still gets its answer."""
    rows = spark.sql(f"CALL lance.describe_layout(table => '{table}')").collect()
    assert rows and rows[0]["table"] == table


@pytest.mark.parametrize("fault, message", [
    ("panic", r"Lance panicked: `DateTime - TimeDelta` overflowed \(lance_compact engine: plan"),
    ("system_exit", r"lance_compact engine: plan was stopped by SystemExit: 3"),
    ("keyboard_interrupt", r"lance_compact engine: plan was stopped by KeyboardInterrupt: injected"),
    ("lose_response", r"stopped serving plan without answering"),
])
def test_a_failure_that_is_no_exception_fails_its_statement_and_the_engine_keeps_serving(
        spark, table, engine_log, fault, message):
    name, path = table
    _answers(spark, name)
    pids = _engine_pids(engine_log)
    version = lance.dataset(str(path)).version
    started = time.monotonic()
    with pytest.raises(Exception, match=message):
        spark.sql(f"CALL lance.plan_compaction(table => '{name}', "
                  f"options => map('test_engine_fault', '{fault}'))").collect()
    assert time.monotonic() - started < BOUND_S
    assert lance.dataset(str(path)).version == version
    _answers(spark, name)
    # the same workers, still serving: none was replaced (the pool may have started one more
    # meanwhile, e.g. its reserve for a short statement while the failed one was released)
    now = _engine_pids(engine_log)
    assert now[:len(pids)] == pids, (pids, now)
    for pid in pids:
        os.kill(int(pid), 0)  # alive


def test_an_unexpected_error_names_the_configured_log_and_leaves_its_traceback_there(spark, table, engine_log):
    """An exception no rule names, raised while serving: the statement fails as an internal error
    asking for a report with the engine's log, naming spark.lance.compact.engine.log's file; that
    file holds the traceback (once), not only a line; the engine keeps serving."""
    name, path = table
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception) as e:
        spark.sql(f"CALL lance.plan_compaction(table => '{name}', "
                  "options => map('test_engine_fault', 'unrecognized'))").collect()
    message = str(e.value)
    assert e.value.getCondition() == "LANCE_INTERNAL_ERROR", message
    assert f"table {name}: lance_compact engine: plan failed: ZeroDivisionError: an unexpected error" in message
    assert f"please report it with the engine's log, {engine_log}, which holds its traceback" in message
    assert "injected by test_engine_fault: no rule names this error" in message
    text = engine_log.read_text(errors="replace")
    at = text.index("engine: plan failed: injected by test_engine_fault")
    trace = text[at:at + 4000]
    assert "Traceback (most recent call last)" in trace and "in _injected_bug" in trace, trace
    assert "ZeroDivisionError: injected by test_engine_fault" in trace
    assert text.count("in _injected_bug") == 1
    assert lance.dataset(str(path)).version == version
    _answers(spark, name)


def test_cleanup_far_in_the_past_is_answered(spark, table):
    """The measured hang: cleanup of versions older than 10^8 days (Lance panics on the date
    arithmetic unless the duration is refused first). Answered either way, within the bound."""
    name, path = table
    version = lance.dataset(str(path)).version
    started = time.monotonic()
    with pytest.raises(Exception, match=r"Lance panicked|older_than"):
        spark.sql(f"CALL lance.cleanup(table => '{name}', older_than => '100000000 days', "
                  "dry_run => true)").collect()
    assert time.monotonic() - started < BOUND_S
    assert lance.dataset(str(path)).version == version
    _answers(spark, name)


def test_a_users_secret_is_not_redacted_from_other_statements_log_lines(spark, warehouse, table, engine_log):
    """A user's secret-named storage option (in a catalog of their own: the operator's catalog
    refuses session storage settings) redacts its value from that user's own statement only;
    the operator's secret never appears in the log."""
    from lance_compact.api import CATALOG_CLASS

    name, _ = table
    user = spark.newSession()
    for key, value in (("", CATALOG_CLASS), (".warehouse", str(warehouse)), (".storage.my_secret", name)):
        user.sql(f"SET spark.sql.catalog.mine{key}={value}")
    user.sql(f"CALL mine.compact(table => '{name}')").collect()
    own = engine_log.read_text().splitlines()
    assert any("table *********(redacted): planned" in line for line in own)
    start = len(own)
    spark.sql(f"CALL lance.compact(table => '{name}')").collect()  # another session
    later = engine_log.read_text().splitlines()[start:]
    assert any(f"table {name}: planned" in line for line in later)
    assert not any("(redacted)" in line for line in later)
    assert OPERATOR_SECRET not in engine_log.read_text()


LOGGING = """
import json, logging, sys
from lance_compact.runtime import secrets
from lance_compact.engine import handle
from lance_compact.runtime.envelope import Result
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
secrets.install_log_redaction()
operator, theirs = sys.argv[1], sys.argv[2]
secrets.remember_operator({"aws_secret_access_key": operator, "short_token": "abc12"})
log = logging.getLogger("lance_compact.test")
said = lambda r: (log.info("LINE compact abc12 %s %s", operator, theirs), Result("x INT", []))[1]
handle({"a": said}, "a", json.dumps({"storage_options": {"my_secret": "compact", "user_token": theirs}}))
handle({"a": said}, "a", json.dumps({}))
"""


def test_redaction_is_the_operators_secrets_and_the_requests_own():
    operator, theirs = f"planted-{uuid.uuid4().hex}", f"user-{uuid.uuid4().hex}"
    p = subprocess.run([sys.executable, "-c", LOGGING, operator, theirs], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    lines = [line for line in p.stderr.splitlines() if line.startswith("LINE")]
    assert lines == ["LINE compact abc12 *********(redacted) *********(redacted)",  # in its own request
                     f"LINE compact abc12 *********(redacted) {theirs}"], p.stderr  # not remembered
    assert operator not in p.stderr


def test_spark_sql_is_answered_after_a_panic(table, warehouse, tmp_path):
    """Through the spark-sql CLI (no Python driver): the panicking statement fails with its
    message and the statements after it run."""
    name, _ = table
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "--hiveconf", "hive.cli.errors.ignore=true", "-e", ";\n".join([
             f"CALL lance.plan_compaction(table => '{name}', options => map('test_engine_fault', 'panic'))",
             f"CALL lance.describe_layout(table => '{name}')"])],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert "Lance panicked: `DateTime - TimeDelta` overflowed" in p.stderr, p.stderr[-3000:]
    assert f"{name}\t" in p.stdout, p.stdout[-3000:]  # describe_layout's row, after the panic


def test_alter_table_refuses_a_value_lance_cannot_use(spark, warehouse):
    """Through SQL: the refused ALTER names the key and Lance's reason and writes nothing; a
    bad value stored by pylance directly fails compaction naming the property and its fix."""
    path = warehouse / "db" / "props.lance"
    degraded_table(str(path))
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=r"table property lance.compaction.data_storage_version = 'garbage!!' "
                                        r"is not a value Lance can use: .*Unknown Lance storage version"):
        spark.sql("ALTER TABLE lance.db.props SET TBLPROPERTIES "
                  "('lance.compaction.data_storage_version' = 'garbage!!')")
    assert lance.dataset(str(path)).version == version
    lance.dataset(str(path)).update_config({"lance.compaction.data_storage_version": "garbage!!"})
    with pytest.raises(Exception, match=r"the table property lance.compaction.data_storage_version holds a "
                                        r"value Lance cannot use .*UNSET TBLPROPERTIES"):
        spark.sql("CALL lance.compact(table => 'db.props')").collect()
    spark.sql("ALTER TABLE lance.db.props UNSET TBLPROPERTIES ('lance.compaction.data_storage_version')")
    assert spark.sql("CALL lance.compact(table => 'db.props')").collect()[0]["new_version"] > version


def test_a_predicate_that_overflowed_lances_stack_is_refused_and_the_engine_lives(spark, table, engine_log):
    """``where => 'id + id + ... = 1'`` (700 operators) killed the engine (SIGSEGV in Lance's
    planner, and Spark's analyzer overflowed the driver thread's stack); now refused before
    either sees it, by its depth (WhereClause.scala), and a long flat list that does translate
    (901 values) by the engine's bound on a filter's tokens."""
    name, path = table
    _answers(spark, name)
    pids = _engine_pids(engine_log)
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=r"where '.*' is nested 70\d levels deep; at most 200 are accepted"):
        spark.sql(f"CALL lance.compact(table => '{name}', where => '{'id + ' * 700}1 = 2')").collect()
    with pytest.raises(Exception, match=r"option where has \d+ tokens .*at most 800"):
        spark.sql(f"CALL lance.compact(table => '{name}', where => 'id IN ({', '.join(map(str, range(901)))})')").collect()
    assert lance.dataset(str(path)).version == version
    _answers(spark, name)
    assert _engine_pids(engine_log) == pids


def test_the_engine_ends_when_its_jvm_cannot_be_reached(tmp_path):
    """The main loop failing (the JVM gone) ends the process at once, by ``os._exit``: a normal
    Python shutdown could wait forever on a thread still inside a request, and the engine's
    stdin (held open here, as a child that inherited the JVM's end of it would) does not end it."""
    import os
    import socket
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYSPARK_GATEWAY_PORT": str(port), "PYSPARK_GATEWAY_SECRET": "x",
           "PYTHONPATH": str(ROOT / "python")}
    read_end, write_end = os.pipe()  # stdin stays open: only the failed main loop can end it
    err = tmp_path / "engine.err"
    try:
        with open(err, "wb") as sink:
            p = subprocess.Popen([sys.executable, "-u", "-m", "lance_compact.engine"], stdin=read_end,
                                 stdout=subprocess.DEVNULL, stderr=sink, env=env, cwd=tmp_path)
        try:
            code = p.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            p.kill()
            pytest.fail("the engine did not end when its JVM could not be reached")
    finally:
        os.close(read_end)
        os.close(write_end)
    text = err.read_text(errors="replace")
    assert code == 1, text[-2000:]
    assert "engine: ending: the main loop failed (the JVM is gone or cannot be reached)" in text, text[-2000:]


def test_a_long_run_of_back_quotes_in_lances_error_is_classified_at_once(tmp_path):
    """A statement's words reach Lance's error (a table path, say) and that error is classified
    in the worker: the rule that names a back-quoted column backtracked over a long run of
    back-quotes holding the GIL (a 30,000-character path: no heartbeat for 60 s, the worker
    killed as hung, on a Thrift server by one SQL statement). It is linear now, and still names
    a real back-quoted column."""
    import pyarrow as pa
    from lance_compact.runtime.failures import classify

    with pytest.raises(Exception) as hostile:
        lance.dataset(str(tmp_path / ("Column " + "`" * 30000 + '"x')))
    started = time.monotonic()
    failure = classify(hostile.value, keep=False)
    assert time.monotonic() - started < 2.0, failure  # was minutes (20,000: 37 s)
    assert "back-quote" not in failure.phrase
    ds = lance.write_dataset(pa.table({"ok": [1, 2], "we`ird": [3, 4]}), str(tmp_path / "quoted.lance"))
    with pytest.raises(Exception) as real:
        ds.to_table(columns=["we`ird"])
    assert "column named 'we`ird', with a back-quote" in classify(real.value, keep=False).phrase, real.value


def test_rust_source_locations_are_scrubbed_in_linear_time():
    """Every error the engine answers is scrubbed of Lance's source locations, and it repeats
    the statement's table path: the pattern, tried at every position, backtracked over a long
    path (40,000 characters: 6.9 s holding the GIL; 120,000 would silence the heartbeat past its
    60 s). Lance's own messages are scrubbed as before."""
    from lance_compact.engine import _SOURCE_PATH, scrub

    hostile = "table /wh/db/" + "a/" * 60000 + "x: does not exist (no Lance dataset there)"
    started = time.monotonic()
    assert scrub(hostile) == hostile
    assert time.monotonic() - started < 2.0
    for said in ("Retryable commit conflict for version 9: This Rewrite transaction was preempted by concurrent "
                 "transaction Delete at version 9., /home/runner/work/lance/lance/rust/lance/src/io/commit/"
                 "conflict_resolver.rs:1583:34",
                 "LanceError(IO): Generic S3 error: status code: 503 Service Unavailable: , /x/object_store.rs:1576:42",
                 "Dataset at path tmp/nope.lance was not found: Not found: tmp/nope.lance/_versions, "
                 "/x/commit.rs:653:26; and at planner.rs:951 (lance-core/src/utils/mask.rs:12:3)",
                 "bytes, /rustc/x/function.rs:250:5 then x.rs:1, y.rs:2:3,z.rs:4"):
        assert scrub(said) == _SOURCE_PATH.sub("", said) and ".rs:" not in scrub(said), said
