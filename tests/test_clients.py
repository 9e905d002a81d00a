"""Every client, against servers this module starts from the pip-installed pyspark:

- Spark Connect: a Connect server with the lance catalog; the PySpark Connect client in this
  process runs CALL, the PySpark API (compact, LanceCompaction, plan_compaction,
  describe_layout) and the histogram; the Scala example application runs over it too
  (``spark-submit --remote``).
- The Thrift JDBC/ODBC server: beeline runs CALL and gets the result row, or the error with
  its SQLSTATE.
- Scala: the example application examples/scala/CompactTable.scala, compiled with the Scala
  compiler in Spark's jars folder and run with spark-submit in local mode.

Every table is a small degraded one (60 fragments of 40 rows, deletions); after each
compaction this process reads it with pylance: the rows are exactly the rows before, there are
fewer fragments, and the result row agrees with the table. One server of each kind for the
module, on 127.0.0.1, stopped at its end (or when it fails to start); their logs are printed
on a failure. Run alone:

    .venv/bin/python -m pytest -q tests/test_clients.py --durations=0

Cost on 2 idle cores, about 65 s in all (about twice that on a loaded machine): Connect server
start 7 s, its Python client tests 8 s (the first CALL 5 s: the server's Python workers start);
Scala: compile 4 s, over Connect 6 s, local mode 12 s (a whole Spark application); Thrift server
start 13 s, beeline 9 s (4 s of JVM per beeline run); stopping both servers 3 s.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import lance
import pytest

import client_servers as cs
from conftest import ROOT
from oracle import content, degraded_table, layout

TARGET = 1000  # rows per output fragment: the 60 fragments of 40 rows become 2 or 3
# The servers start with test hooks on (the cancel tests slow a task through one).
os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
SCALA_EXAMPLE = ROOT / "examples" / "scala" / "CompactTable.scala"


def make_table(warehouse: Path, name: str) -> tuple[str, Path, lance.LanceDataset]:
    path = warehouse / "db" / f"{name}.lance"
    return f"db.{name}", path, degraded_table(str(path))


def check_compaction(result: dict, ident: str, before: lance.LanceDataset, path: Path) -> lance.LanceDataset:
    """The result row of one compaction of a whole degraded table, against the table itself;
    values as any client gives them (strings from beeline)."""
    after = lance.dataset(str(path))
    r = {k: int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v for k, v in result.items()}
    assert content(after) == content(before)  # exactly the rows before, row by row
    frags_before, frags_after = before.get_fragments(), after.get_fragments()
    assert len(frags_after) < len(frags_before)
    assert r["table"] == ident and r["strategy"] == "default"
    assert r["read_version"] == before.version and r["new_version"] == after.version > before.version
    assert r["fragments_removed"] == len(frags_before) and r["fragments_added"] == len(frags_after)
    assert r["files_added"] == len(frags_after)
    assert r["rows_rewritten"] == after.count_rows() == before.count_rows()
    assert r["deleted_rows_removed"] == layout(before)["deleted_rows"] > 0
    assert layout(after)["deleted_rows"] == 0
    assert r["bytes_read"] == sum(f.file_size_bytes for x in frags_before for f in x.metadata.files)
    assert r["bytes_written"] == sum(f.file_size_bytes for x in frags_after for f in x.metadata.files)
    assert r["tasks"] >= 1 and r["commits"] == 1
    assert r["tasks_left"] == r["fragments_left"] == r["retries"] == r["tasks_conflicted"] == r["tasks_failed"] == 0
    assert r["elapsed_ms"] > 0
    return after


def result_line(stdout: str) -> dict:
    """The Scala example's ``result: <row as JSON>`` line."""
    lines = [line for line in stdout.splitlines() if line.startswith("result: ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("result: "):])


# ---------------------------------------------------------------------------------------------
# Spark Connect

@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    """A Spark Connect server with the lance catalog; yields (server, warehouse)."""
    yield from cs.served(tmp_path_factory, "connect", cs.connect_server)


@pytest.fixture(scope="module")
def remote(connect):
    """The PySpark Connect client's session (client_servers.remote_session)."""
    server, _ = connect
    with cs.remote_session(server.port) as session:
        yield session


def test_connect_call(connect, remote):
    server, wh = connect
    ident, path, before = make_table(wh, "connect_sql")
    with server.logs_on_failure():
        from pyspark.sql.connect.session import SparkSession as ConnectSession
        assert isinstance(remote, ConnectSession)
        rows = remote.sql(f"CALL lance.compact(table => '{ident}', target_rows_per_fragment => {TARGET})").collect()
        assert len(rows) == 1
        check_compaction(rows[0].asDict(), ident, before, path)


def test_connect_reads_through_the_catalog_and_cannot_name_its_read_source(connect, remote):
    """A Connect client reads a table with the catalog's distributed read (a Python data source
    scan on the server), and cannot name that source itself: by SQL or ``read.format``."""
    server, wh = connect
    ident, path, before = make_table(wh, "connect_read")
    ids = before.to_table(columns=["id"])["id"].to_pylist()
    with server.logs_on_failure():
        assert "(Python)" in remote.sql(f"EXPLAIN SELECT id FROM lance.{ident}").collect()[0][0]
        assert tuple(remote.sql(f"SELECT count(*), sum(id) FROM lance.{ident} WHERE id >= 0").collect()[0]) \
            == (len(ids), sum(ids))
        request = f'{{"table": "x", "uri": "{path}", "columns": ["id"]}}'
        with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
            remote.sql("CREATE TEMPORARY VIEW leak (id BIGINT) USING lance_compact_read OPTIONS "
                       f"(request '{request}', partitions '[[0]]')").collect()
        with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
            remote.read.format("lance_compact_read").schema("id BIGINT").option("request", request) \
                .option("partitions", "[[0]]").load().collect()


def test_connect_pyspark_api(connect, remote):
    from lance_compact import LanceCompaction, compact, plan_compaction

    server, wh = connect
    with server.logs_on_failure():
        ident, path, before = make_table(wh, "connect_compact")
        df = compact(remote, ident, target_rows_per_fragment=TARGET)
        row = df.collect()[0]
        after = check_compaction(row.asDict(), ident, before, path)
        # The CALL ran once, when it was issued: collecting the DataFrame again compacts nothing.
        assert df.collect() == [row] and lance.dataset(str(path)).version == after.version

        ident, path, before = make_table(wh, "connect_builder")
        plan = plan_compaction(remote, ident, target_rows_per_fragment=500).collect()
        assert plan and all(p.selected and p.read_version == before.version for p in plan)
        assert sorted(i for p in plan for i in p.fragment_ids) == [f.fragment_id for f in before.get_fragments()]
        assert lance.dataset(str(path)).version == before.version  # a dry run writes nothing
        row = (LanceCompaction(remote, ident).option("target_rows_per_fragment", 500)
               .option("num_threads", 2).execute().collect()[0])
        check_compaction(row.asDict(), ident, before, path)
        assert row.tasks == len(plan)


def test_connect_layout_and_histogram(connect, remote):
    from lance_compact import FragmentHistogram, compact, describe_layout

    server, wh = connect
    with server.logs_on_failure():
        ident, path, before = make_table(wh, "connect_layout")
        facts = layout(before)
        before_df = describe_layout(remote, ident)
        d = before_df.collect()[0]
        assert (d.table, d.version, d.fragments, d.rows, d.deleted_rows) == \
            (ident, before.version, facts["fragments"], facts["rows"], facts["deleted_rows"])
        assert list(d.fragment_rows) == facts["rows_per_fragment"]
        assert d.small_fragments == d.fragments and d.fragments_with_deletions == facts["fragments_with_deletions"]
        assert d.last_compacted_version is None

        r = compact(remote, ident, target_rows_per_fragment=TARGET).collect()[0]
        after = check_compaction(r.asDict(), ident, before, path)
        after_df = describe_layout(remote, ident)
        a = after_df.collect()[0]
        assert a.version == r.new_version == a.last_compacted_version == after.version
        assert a.fragments == r.fragments_added and list(a.fragment_rows) == layout(after)["rows_per_fragment"]
        assert a.last_compaction == f"{r.fragments_removed} fragments -> {r.fragments_added}"

        # The histogram takes the Connect DataFrames themselves; the layout before is still the
        # one before (the CALL ran when it was issued).
        h = FragmentHistogram.of(before_df, after_df)
        counts = dict(h.counts())
        assert list(counts) == [f"version {before.version}", f"version {after.version}"]
        assert sum(counts[f"version {before.version}"]) == len(before.get_fragments())
        assert sum(counts[f"version {after.version}"]) == len(after.get_fragments())
        svg = h._repr_svg_()
        assert svg.startswith("<svg") and svg.count('class="bar"') == 2 * len(h.buckets)


def test_connect_errors(connect, remote):
    from pyspark.errors import AnalysisException, PySparkException
    from lance_compact import compact

    server, wh = connect
    with server.logs_on_failure():
        for run in (lambda: remote.sql("CALL lance.compact(table => 'db.nope')").collect(),
                    lambda: compact(remote, "db.nope").collect()):
            with pytest.raises(AnalysisException) as e:
                run()
            assert "The table or view db.nope cannot be found" in str(e.value)
            assert e.value.getSqlState() == "42P01"
        # An error of the engine process reaches the client with its message, error condition
        # and SQLSTATE; a misspelled name gets a suggestion.
        ident, path, before = make_table(wh, "connect_bad")
        with pytest.raises(PySparkException) as e:
            compact(remote, ident, options={"colour": "blue"}).collect()
        assert f"table {ident}: unknown options map key 'colour'; valid options are:" in str(e.value)
        assert (e.value.getCondition(), e.value.getSqlState()) == ("LANCE_INVALID_ARGUMENT", "22023")
        with pytest.raises(AnalysisException) as e:
            remote.sql(f"CALL lance.compact(table => '{ident}', options => map('target_row_per_fragment', '5'))").collect()
        assert "(did you mean 'target_rows_per_fragment'?)" in str(e.value)
        assert e.value.getCondition() == "LANCE_INVALID_ARGUMENT"
        with pytest.raises(TypeError, match="did you mean 'target_rows_per_fragment'"):
            compact(remote, ident, target_row_per_fragment=5)
        assert lance.dataset(str(path)).version == before.version


def test_connect_table_builder_and_helpers(connect, remote):
    """LanceTable's builder (where in Spark SQL, sort_order) and the table_health / history
    DataFrames over Connect: the columns of parameters.json, the compaction among the history."""
    from lance_compact import LanceTable, history, table_health
    from lance_compact.options import result_columns

    server, wh = connect
    with server.logs_on_failure():
        ident, path, before = make_table(wh, "connect_table")
        t = LanceTable.for_name(remote, ident)
        row = (t.optimize().where("id < 1200 AND category IS NOT NULL").sort_order("id DESC")
               .target_rows_per_fragment(500).execute().collect()[0])
        after = lance.dataset(str(path))
        assert content(after) == content(before) and row.new_version == after.version
        assert row.fragments_removed >= 2 and len(after.get_fragments()) < len(before.get_fragments())
        health = t.health()
        assert health.columns == [n for n, _ in result_columns("health_columns")]
        assert [(r.namespace, r.table, r.version) for r in health.collect()] == [("db", "connect_table", after.version)]
        versions = history(remote, ident)
        assert versions.columns == [n for n, _ in result_columns("history_columns")]
        assert any(r.version > before.version for r in versions.where("maintenance").collect())
        assert "connect_table" in {r.table for r in table_health(remote).collect()}
        assert t.layout().collect()[0].version == after.version


def wait_for_cancelled(engine_log: Path, table: str, timeout: float = 30) -> str:
    """The engine's log line saying the run of ``table`` was cancelled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [x for x in engine_log.read_text(errors="replace").splitlines()
                 if f"table {table}: cancelled" in x]
        if lines:
            return lines[-1]
        time.sleep(0.5)
    raise AssertionError(f"the engine did not log that {table}'s run was cancelled")


def slow_call(ident: str) -> str:
    """A CALL whose task 0 sleeps two minutes (test hook) while the others finish."""
    return (f"CALL lance.compact(table => '{ident}', target_rows_per_fragment => {TARGET}, "
            "options => map('test_task_sleep_ms', '0:120000'))")


def test_connect_interrupt_stops_the_call(connect, remote):
    """Spark Connect's interruptTag (a notebook's stop button): the CALL ends within seconds,
    the engine stops its run (its log says cancelled), nothing is committed, rows exact."""
    import threading

    server, wh = connect
    ident, path, before = make_table(wh, "connect_cancel")
    files = set(os.listdir(path / "data"))
    errors: list = []

    def run():
        remote.addTag("lance-cancel-test")
        try:
            remote.sql(slow_call(ident)).collect()
        except Exception as e:  # asserted below
            errors.append(e)

    with server.logs_on_failure():
        th = threading.Thread(target=run, daemon=True)
        th.start()
        deadline = time.monotonic() + 120
        while not set(os.listdir(path / "data")) - files:  # the other tasks are writing
            assert time.monotonic() < deadline and th.is_alive(), errors
            time.sleep(0.2)
        time.sleep(1)
        interrupted = time.monotonic()
        remote.interruptTag("lance-cancel-test")
        th.join(60)
        assert not th.is_alive() and errors, "the CALL did not end after the interrupt"
        print(f"\nConnect interruptTag -> client error after {time.monotonic() - interrupted:.2f} s")
        line = wait_for_cancelled(server.workdir / "connect-engine.log", ident)
        assert "cancelled during batch 1" in line, line
        time.sleep(2)
        assert lance.dataset(str(path)).version == before.version
        assert content(lance.dataset(str(path))) == content(before)


# ---------------------------------------------------------------------------------------------
# Scala

@pytest.fixture(scope="module")
def scala_app(tmp_path_factory) -> Path:
    """examples/scala/CompactTable.scala compiled against the installed Spark."""
    out = tmp_path_factory.mktemp("scala") / "compact-table.jar"
    t0 = time.monotonic()
    cs.compile_scala([SCALA_EXAMPLE], out)
    print(f"compiled {SCALA_EXAMPLE.name} in {time.monotonic() - t0:.1f} s")
    return out


def test_scala_application_over_connect(connect, scala_app, tmp_path):
    """The same application jar, as a Spark Connect client (`spark-submit --remote`)."""
    server, wh = connect
    ident, path, before = make_table(wh, "connect_scala")
    log = tmp_path / "spark-submit.log"
    p = cs.spark_submit(["--remote", f"sc://127.0.0.1:{server.port}", "--class", "CompactTable",
                         str(scala_app), str(wh), ident, str(TARGET)], tmp_path, log)
    with server.logs_on_failure():
        assert p.returncode == 0, p.stdout + cs.tail(log)
        check_compaction(result_line(p.stdout), ident, before, path)
        assert f"{ident}: version {before.version} -> " in p.stdout


def test_scala_application(scala_app, tmp_path):
    """The application in local mode: it builds its session with the catalog itself;
    spark-submit adds the jar and the Python that runs the engine and the executors."""
    wh = tmp_path / "wh"
    ident, path, before = make_table(wh, "scala_local")
    log = tmp_path / "spark-submit.log"
    p = cs.spark_submit([*cs.local_args(tmp_path), "--class", "CompactTable", "--jars", cs.jar_path(),
                         "--conf", f"spark.sql.execution.pyspark.python={sys.executable}",
                         str(scala_app), str(wh), ident, str(TARGET)], tmp_path, log)
    assert p.returncode == 0, p.stdout + cs.tail(log)
    check_compaction(result_line(p.stdout), ident, before, path)
    assert not {"metastore_db", "derby.log"} & {f.name for f in tmp_path.iterdir()}


# ---------------------------------------------------------------------------------------------
# The Thrift JDBC/ODBC server and beeline

@pytest.fixture(scope="module")
def thrift(tmp_path_factory):
    """The Thrift server with the lance catalog; yields (server, warehouse)."""
    yield from cs.served(tmp_path_factory, "thrift", cs.thrift_server)


def tsv_results(stdout: str, header_start: str) -> list[dict]:
    """Rows under every header that starts so, from beeline's tsv2 output."""
    lines = stdout.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith(header_start + "\t") and i + 1 < len(lines):
            out.append(dict(zip(line.split("\t"), lines[i + 1].split("\t"))))
    return out


def test_beeline_call(thrift):
    server, wh = thrift
    ident, path, before = make_table(wh, "beeline")
    with server.logs_on_failure():
        p = cs.beeline(server.port, f"CALL lance.compact(table => '{ident}', target_rows_per_fragment => {TARGET}); "
                                    f"CALL lance.describe_layout(table => '{ident}');", server.workdir)
        assert p.returncode == 0, p.stdout + p.stderr
        results = tsv_results(p.stdout, "table\tstrategy")
        assert len(results) == 1, p.stdout
        after = check_compaction(results[0], ident, before, path)
        described = tsv_results(p.stdout, "table\tversion")
        assert len(described) == 1 and described[0]["fragments"] == str(len(after.get_fragments()))
        # The Hive metastore the server needs is in memory: nothing of it in the server's folder.
        assert not {"metastore_db", "derby.log"} & {f.name for f in server.workdir.iterdir()}


def test_thrift_cancel_stops_the_call(thrift):
    """The Thrift server cancels a statement past spark.sql.thriftServer.queryTimeout as its
    cancel does (job group cancelled, statement thread interrupted): the engine stops the run,
    nothing is committed, rows exact."""
    server, wh = thrift
    ident, path, before = make_table(wh, "thrift_cancel")
    with server.logs_on_failure():
        started = time.monotonic()
        p = cs.beeline(server.port, f"SET spark.sql.thriftServer.queryTimeout=8s; {slow_call(ident)};",
                       server.workdir)
        print(f"\nThrift query timeout (8 s) -> beeline ended after {time.monotonic() - started:.1f} s")
        assert p.returncode != 0, p.stdout
        assert "timed out" in (p.stdout + p.stderr).lower() or "cancel" in (p.stdout + p.stderr).lower(), \
            p.stdout + p.stderr
        wait_for_cancelled(server.workdir / "thrift-engine.log", ident)
        time.sleep(2)
        assert lance.dataset(str(path)).version == before.version
        assert content(lance.dataset(str(path))) == content(before)


def test_beeline_errors(thrift):
    server, wh = thrift
    ident, path, before = make_table(wh, "beeline_bad")
    with server.logs_on_failure():
        p = cs.beeline(server.port, "CALL lance.compact(table => 'db.nope')", server.workdir)
        out = p.stdout + p.stderr
        assert p.returncode != 0
        assert "The table or view db.nope cannot be found" in out and "(state=42P01," in out
        # An error of the engine process, with its message.
        p = cs.beeline(server.port, f"CALL lance.compact(table => '{ident}', options => map('colour', 'blue'))",
                       server.workdir)
        out = p.stdout + p.stderr
        assert p.returncode != 0
        assert f"table {ident}: unknown options map key 'colour'; valid options are:" in out
        assert "[LANCE_INVALID_ARGUMENT]" in out and "(state=22023," in out  # the kind's SQLSTATE over JDBC
        assert lance.dataset(str(path)).version == before.version
