"""Indices survive compaction: Lance's commit remaps them, queries answer the same. Indices in
SQL: CREATE INDEX / DROP INDEX (Spark's SupportsIndex), CALL lance.drop_index, the indices
metadata table, table_health's index columns."""
import shutil
from datetime import datetime

import lance
import numpy as np
import pytest

from oracle import batch, content, degraded_table


@pytest.fixture
def indexed_table(warehouse):
    path = warehouse / "db" / "indexed.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=60, rows_per_fragment=50)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    # Streaming goes on after the index build: unindexed fragments, then more deletes.
    ds = lance.write_dataset(batch(10_000, 400, seed=1), str(path), mode="append", max_rows_per_file=50)
    ds.delete("id % 11 = 0")
    return "db.indexed", path


def queries(ds):
    rng = np.random.default_rng(7)
    scalar = {f: ds.to_table(filter=f, columns=["id", "category"]).sort_by("id")
              for f in ["id = 123", "id < 400", "id >= 2900 AND id < 3100", "id > 10100"]}
    vectors = []
    for _ in range(5):
        q = rng.standard_normal(8).astype(np.float32)
        t = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4},
                        columns=["id"])
        vectors.append((t["id"].to_pylist(), np.round(t["_distance"].to_numpy(), 4).tolist()))
    return scalar, vectors


def uses_index(ds, column):
    stats = ds.stats.index_stats(f"{column}_idx")
    return stats["num_indexed_rows"] > 0


@pytest.mark.parametrize("defer", [False, True])
def test_btree_and_ivf_pq_answer_the_same_after_compaction(spark, indexed_table, defer):
    table, path = indexed_table
    before = lance.dataset(str(path))
    expected = queries(before)
    assert "ScalarIndexQuery" in before.scanner(filter="id = 123").explain_plan()

    # restore_indices off: optimize_indices would add the unindexed appends to the IVF_PQ index (other
    # approximate answers); here the compaction's remap alone must keep every answer
    r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 500, "
                  f"defer_index_remap => {str(defer).lower()}, options => map('restore_indices', 'false'))").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 2 and r.new_version == after.version
    assert len(after.get_fragments()) < len(before.get_fragments())
    assert content(after) == content(before)
    names = {i["name"] for i in after.list_indices()}
    assert {"id_idx", "vector_idx"} <= names
    if defer:
        # Deferred remap: Lance records a fragment-reuse index instead of remapping.
        assert any("frag_reuse" in n for n in names)
    assert "ScalarIndexQuery" in after.scanner(filter="id = 123").explain_plan()
    assert uses_index(after, "id") and uses_index(after, "vector")
    assert queries(after) == expected


# ---- indices in SQL: CREATE INDEX, DROP INDEX, listing (issue 35) --------------------------

def two_segments_and_appends(path):
    """8 fragments of 50 rows; id_idx (BTREE) in 2 segments over the first 6 (built, 2 appended,
    then a delta segment), the last 2 appended after: unindexed."""
    shutil.rmtree(path, ignore_errors=True)
    ds = lance.write_dataset(batch(0, 200), str(path), max_rows_per_file=50)
    ds.create_scalar_index("id", index_type="BTREE")
    ds = lance.write_dataset(batch(200, 100), str(path), mode="append", max_rows_per_file=50)
    ds.optimize.optimize_indices(num_indices_to_merge=0)  # a new segment for the 2 appended
    return lance.write_dataset(batch(300, 100), str(path), mode="append", max_rows_per_file=50)


def failure(spark, sql):
    with pytest.raises(Exception) as e:
        spark.sql(sql).collect()
    return str(e.value)


def java_table(spark, namespace, name):
    """The catalog's table as Spark's SupportsIndex sees it (the JVM object)."""
    jvm = spark._jvm
    ns = spark._sc._gateway.new_array(jvm.java.lang.String, 1)
    ns[0] = namespace
    ident = jvm.org.apache.spark.sql.connector.catalog.Identifier.of(ns, name)
    return spark._jsparkSession.sessionState().catalogManager().catalog("lance").loadTable(ident)


def test_indices_table_listing_and_health_show_segments_coverage_and_age(spark, warehouse):
    path = warehouse / "db" / "segmented.lance"
    ds = two_segments_and_appends(path)
    segments = sorted(s.created_at for d in ds.describe_indices() if d.name == "id_idx" for s in d.segments)
    assert len(segments) == 2
    row, = spark.sql("SELECT * FROM lance.db.segmented.indices").collect()
    assert (row.name, row.type, row.columns, row.segments) == ("id_idx", "BTree", ["id"], 2)
    assert (row.fragments_covered, row.fragments, row.unindexed_fragments, row.unindexed_rows) == (6, 8, [6, 7], 100)
    assert row.metric is None
    # Spark shows a TIMESTAMP in the session's time zone, without one
    local = [s.astimezone().replace(tzinfo=None) for s in segments]
    assert (row.created_at, row.updated_at) == (local[0], local[1])
    assert 0 <= row.age_hours < 1

    # Spark's SupportsIndex.listIndexes (no SQL statement of Spark's lists indices)
    table = java_table(spark, "db", "segmented")
    assert table.indexExists("id_idx") and not table.indexExists("ID_IDX")
    listed, = table.listIndexes()
    props = dict(listed.properties())
    assert (listed.indexName(), listed.indexType(), [c.toString() for c in listed.columns()]) == ("id_idx", "BTree", ["id"])
    assert (props["segments"], props["fragments_covered"], props["fragments"], props["unindexed_rows"]) == ("2", "6", "8", "100")
    assert props["unindexed_fragments"] == "6,7"
    assert datetime.fromisoformat(props["created_at"].replace("Z", "+00:00")) == segments[0]

    health, = spark.sql("SELECT * FROM lance.system.table_health WHERE table = 'segmented'").collect()
    assert (health.unindexed_fragments, health.unindexed_rows, health.index_segments) == (2, 100, 2)
    assert [(i.name, i.unindexed_fragments, i.unindexed_rows, i.segments) for i in health.indices] == [("id_idx", 2, 100, 2)]


def test_drop_index_in_sql_and_by_call(spark, warehouse):
    from lance_compact import drop_index

    path = warehouse / "db" / "droppable.lance"
    ds = two_segments_and_appends(path)
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=2, metric="cosine")
    version, expected = lance.dataset(str(path)).version, content(lance.dataset(str(path)))
    assert {r.name: r.metric for r in spark.sql("SELECT name, metric FROM lance.db.droppable.indices").collect()} == \
        {"id_idx": None, "vector_idx": "cosine"}

    # an unknown name: refused naming the table's indices, by DROP INDEX and by CALL; IF EXISTS: nothing
    message = failure(spark, "DROP INDEX nope ON lance.db.droppable")
    assert "INDEX_NOT_FOUND" in message and "its indices are: id_idx, vector_idx" in message
    message = failure(spark, "CALL lance.drop_index(table => 'db.droppable', name => 'nope')")
    assert "no index named 'nope'; its indices are: id_idx, vector_idx" in message
    assert spark.sql("DROP INDEX IF EXISTS nope ON lance.db.droppable").collect() == []
    assert "needs the index's name" in failure(spark, "CALL lance.drop_index(table => 'db.droppable')")
    assert lance.dataset(str(path)).version == version

    files = [path / "_indices" / i["uuid"] for i in lance.dataset(str(path)).list_indices() if i["name"] == "id_idx"]
    assert spark.sql("DROP INDEX id_idx ON lance.db.droppable").collect() == []
    after = lance.dataset(str(path))
    assert len(files) == 2 and all(f.is_dir() for f in files)  # kept for older versions until cleanup
    assert after.version == version + 1 and [i["name"] for i in after.list_indices()] == ["vector_idx"]
    assert content(after) == expected
    assert {i.name for i in after.read_transaction(after.version).operation.removed_indices} == {"id_idx"}
    history = spark.sql("SELECT details FROM lance.system.maintenance_history "
                        f"WHERE table = 'droppable' AND version = {after.version}").collect()
    assert history[0].details == "index id_idx dropped (2 segments)"
    assert "INDEX_NOT_FOUND" in failure(spark, "DROP INDEX id_idx ON lance.db.droppable")

    r, = drop_index(spark, "db.droppable", name="vector_idx").collect()
    assert (r.name, r.type, r.columns, r.segments, r.read_version, r.new_version) == \
        ("vector_idx", "IVF_PQ", ["vector"], 1, version + 1, version + 2)
    final = lance.dataset(str(path))
    assert final.list_indices() == [] and content(final) == expected
    assert spark.sql("SELECT * FROM lance.db.droppable.indices").collect() == []


def job_descriptions(spark) -> list[str]:
    """The descriptions of the session's Spark jobs so far (Spark's status store: the UI's)."""
    jobs = spark._jsparkSession.sparkContext().statusStore().jobsList(None)
    out = []
    for i in range(jobs.size()):
        d = jobs.apply(i).description()
        out.append(d.get() if d.isDefined() else "")
    return out


def test_create_index_in_sql_is_the_create_index_procedure(spark, warehouse):
    path = warehouse / "db" / "created.lance"
    shutil.rmtree(path, ignore_errors=True)
    lance.write_dataset(batch(0, 400), str(path), max_rows_per_file=50)
    version = lance.dataset(str(path)).version

    assert spark.sql("CREATE INDEX cat_idx ON lance.db.created USING BITMAP (category)").collect() == []
    ds = lance.dataset(str(path))
    assert ds.version == version + 1 and [i["name"] for i in ds.list_indices()] == ["cat_idx"]
    # the job descriptions name the table as CALL lance.create_index(table => 'db.created') does
    assert any("create_index db.created: " in d for d in job_descriptions(spark))
    # a query that uses it answers what a full scan does
    f = "category = 'cat-3'"
    assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan()
    indexed = ds.to_table(filter=f, columns=["id"]).sort_by("id")
    assert indexed == ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")
    assert indexed["id"].to_pylist() == [i for i in range(400) if i % 17 == 3]
    assert sorted(r.id for r in spark.sql(f"SELECT id FROM lance.db.created WHERE {f}").collect()) == \
        indexed["id"].to_pylist()
    row, = spark.sql("SELECT * FROM lance.db.created.indices").collect()
    assert (row.name, row.type, row.columns, row.segments, row.fragments_covered, row.unindexed_rows) == \
        ("cat_idx", "Bitmap", ["category"], 1, 8, 0)

    # IF NOT EXISTS: nothing is built; without it Spark's INDEX_ALREADY_EXISTS; replace = true rebuilds
    assert spark.sql("CREATE INDEX IF NOT EXISTS cat_idx ON lance.db.created USING BITMAP (category)").collect() == []
    assert lance.dataset(str(path)).version == version + 1
    message = failure(spark, "CREATE INDEX cat_idx ON lance.db.created USING BITMAP (category)")
    assert "INDEX_ALREADY_EXISTS" in message and lance.dataset(str(path)).version == version + 1
    uuid = ds.list_indices()[0]["uuid"]
    spark.sql("CREATE INDEX cat_idx ON lance.db.created USING BTREE (category) OPTIONS (replace = true)").collect()
    ds = lance.dataset(str(path))
    assert [(i["name"], i["type"]) for i in ds.list_indices()] == [("cat_idx", "BTree")]
    assert ds.list_indices()[0]["uuid"] != uuid and ds.to_table(filter=f, columns=["id"]).sort_by("id") == indexed

    # a vector index: metric and Lance's parameters in OPTIONS (the column's own OPTIONS too)
    spark.sql("CREATE INDEX vec_idx ON TABLE lance.db.created USING IVF_PQ (vector OPTIONS (num_sub_vectors = 2)) "
              "OPTIONS (num_partitions = 2, metric = 'cosine', num_bits = 4)").collect()  # 400 rows: 4-bit PQ
    rows = {r.name: r for r in spark.sql("SELECT * FROM lance.db.created.indices").collect()}
    assert rows["vec_idx"].type == "IVF_PQ" and rows["vec_idx"].metric == "cosine"
    assert rows["vec_idx"].fragments_covered == 8
    details, = [d.details for d in lance.dataset(str(path)).describe_indices() if d.name == "vec_idx"]
    assert details["metric_type"].lower() == "cosine" and details["compression"]["num_sub_vectors"] == 2


@pytest.mark.parametrize("statement,match", [
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (nope)", "UNRESOLVED_COLUMN"),
    ("CREATE INDEX x_idx ON lance.db.bad USING NOPE (id)", "NOPE"),
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (id) OPTIONS (bogus = 3)", "bogus"),
    ("CREATE INDEX x_idx ON lance.db.bad USING IVF_PQ (category)", "category"),
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (id, category)", "a Lance index covers one column"),
    ("CREATE INDEX x_idx ON lance.db.bad (id)", "needs the index's type"),
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (id) OPTIONS (replace = 'maybe')",
     "replace expects true or false, got 'maybe'"),
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (id) OPTIONS (dry_run = true)", "OPTIONS may not hold dry_run"),
    ("CREATE INDEX x_idx ON lance.db.bad USING BTREE (id) OPTIONS (metric = 'l2', METRIC = 'dot')", "given twice"),
    ("CREATE INDEX `x\nidx` ON lance.db.bad USING BTREE (id)", "contains a control character"),
    ("CREATE INDEX id_idx ON lance.db.bad USING BITMAP (id)", "INDEX_ALREADY_EXISTS"),
    ("DROP INDEX `x\nidx` ON lance.db.bad", "contains a control character"),
    # a metadata table takes no index: Spark's own words
    ("CREATE INDEX x_idx ON lance.db.bad.indices USING BTREE (name)", "CreateIndex is not supported in this table"),
    ("DROP INDEX id_idx ON lance.db.bad.fragments", "DropIndex is not supported in this table"),
])
def test_bad_index_statements_are_refused_and_change_nothing(spark, warehouse, statement, match):
    path = warehouse / "db" / "bad.lance"
    if not path.exists():
        lance.write_dataset(batch(0, 100), str(path), max_rows_per_file=50).create_scalar_index("id", "BTREE")
    version, indices = lance.dataset(str(path)).version, lance.dataset(str(path)).list_indices()
    message = failure(spark, statement)
    assert match in message, message[:1500]
    assert lance.dataset(str(path)).version == version and lance.dataset(str(path)).list_indices() == indices


def test_a_cancelled_create_index_statement_commits_nothing(spark, warehouse):
    """CREATE INDEX is cancelled as CALL lance.create_index is: its statement's job group
    cancelled while its segments build on Spark tasks (a test hook keeps the small table off
    the engine and makes each task wait), nothing committed, no segment folder left."""
    import threading
    import time

    from conftest import wait_for

    path = warehouse / "db" / "cancelled.lance"
    shutil.rmtree(path, ignore_errors=True)
    lance.write_dataset(batch(0, 400), str(path), max_rows_per_file=50)
    version = lance.dataset(str(path)).version
    sc = spark.sparkContext
    out = {}

    def run():
        sc.setJobGroup("create-index-sql-cancel", "cancelled CREATE INDEX", interruptOnCancel=True)
        try:
            spark.sql("CREATE INDEX id_idx ON lance.db.cancelled USING BTREE (id) "
                      "OPTIONS (rows_per_segment = 1000, test_task_sleep_ms = 'all:4000')").collect()
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["error"] = str(e)

    thread = threading.Thread(target=run)
    thread.start()
    tracker = sc.statusTracker()
    wait_for(lambda: tracker.getJobIdsForGroup("create-index-sql-cancel"), timeout=60)
    time.sleep(1)
    sc.cancelJobGroup("create-index-sql-cancel")
    thread.join(60)
    assert not thread.is_alive() and "cancelled" in out.get("error", ""), out
    assert "nothing was committed" in out["error"]
    ds = lance.dataset(str(path))
    assert ds.version == version and not ds.describe_indices()
    assert not (path / "_indices").exists() or not any((path / "_indices").iterdir())


# ---- names (issue 41): an index's name is checked once, by the engine (runtime/identifiers.py),
# for CALL lance.create_index, CREATE INDEX and the PySpark API alike, before anything is read or
# logged; every name it accepts can be dropped; a name never reaches a log line unescaped.

FORGED = "INFO lance_compact.engine: forged line"

BAD_INDEX_NAMES = [  # (name, what the refusal says: the engine's words, or the catalog's for CREATE INDEX)
    (f"x\n{FORGED}", "contains a control character"),
    (f"x\r{FORGED}", "contains a control character"),
    ("tab\there", "contains a control character"),
    ("del\x7f", "contains a control character"),
    ("nel\x85", "contains a control character"),
    ("line\u2028sep", "contains a control character"),
    ("zero\u200bwidth", "contains a character that is not printable (\\u200b"),
    ("bidi\u202eevil", "contains a character that is not printable (\\u202e"),
    ("private\ue000", "contains a character that is not printable (\\ue000"),
    ("__mine", "it starts with '__', which Lance keeps for its own system indices"),
    ("__lance_frag_reuse", "it starts with '__'"),
    ("a/b", "contains '/' or '\\'"),
    ("..\\up", "contains '/' or '\\'"),
    (".", "it is '.' or '..'"),
    ("..", "it is '.' or '..'"),
    (" lead", "starts or ends with a space"),
    ("trail ", "starts or ends with a space"),
    ("x" * 129, "it has 129 characters, more than 128"),
    ("y" * 5000, "it has 5,000 characters, more than 128"),
]


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal: anything but plain ASCII as a \\u escape."""
    return "'" + "".join(c if (c.isascii() and c.isalnum()) or c in " -_.,/" else f"\\u{ord(c):04x}"
                         for c in text) + "'"


def backquoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def engine_log(spark) -> str:
    """The text of the session's engine log (EngineProcess.logFile)."""
    from pathlib import Path

    engine = spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession)
    return Path(engine.logFile().getPath()).read_text(errors="replace")


def no_forged_line(text: str) -> None:
    assert not any(line.lstrip("\r").startswith(FORGED) for line in text.splitlines()), text[-3000:]


@pytest.fixture(scope="module")
def named(warehouse):
    """A small table with one index (id_idx), for the name checks."""
    path = warehouse / "db" / "named.lance"
    lance.write_dataset(batch(0, 200), str(path), max_rows_per_file=50).create_scalar_index("id", "BTREE")
    return "db.named", path


@pytest.mark.parametrize("name,says", BAD_INDEX_NAMES, ids=[repr(n[:12]) for n, _ in BAD_INDEX_NAMES])
def test_a_bad_index_name_is_refused_by_every_entry_and_changes_nothing(spark, named, name, says):
    from lance_compact import create_index

    table, path = named
    before = lance.dataset(str(path))
    version, indices = before.version, before.list_indices()
    entries = {
        "CALL": lambda: spark.sql(f"CALL lance.create_index(table => '{table}', column => 'id', index_type => "
                                  f"'BTREE', name => {sql_string(name)})").collect(),
        "CREATE INDEX": lambda: spark.sql(f"CREATE INDEX {backquoted(name)} ON lance.{table} USING BTREE (id)").collect(),
        "PySpark": lambda: create_index(spark, table, "id", "BTREE", name=name).collect(),
    }
    for entry, run in entries.items():
        with pytest.raises(Exception) as e:
            run()
        message = str(e.value)
        assert says in message, (entry, message[:2000])
        if not name.isprintable():  # shown escaped, never raw
            assert not any(c in message for c in name if not c.isprintable() and c != " "), (entry, message[:2000])
        no_forged_line(message)
        ds = lance.dataset(str(path))
        assert (ds.version, ds.list_indices()) == (version, indices), entry


def test_a_refused_name_never_reaches_a_log_line_raw(spark, named, warehouse):
    """The attack: a newline in name => wrote a forged line into the server's log. Refused now
    before anything logs it; and an index pylance made with such a name (the engine cannot stop
    that) is written escaped wherever its name is said: the driver's log (Progress), the Spark
    jobs' descriptions, the engine's log, errors."""
    from lance_compact import optimize_indices

    table, path = named
    with pytest.raises(Exception) as e:
        spark.sql(f"CALL lance.create_index(table => '{table}', column => 'category', index_type => 'BITMAP', "
                  f"name => {sql_string('x' + chr(10) + FORGED)})").collect()
    assert "index name 'x\\nINFO lance_compact.engine: forged line' is refused" in str(e.value)

    odd = warehouse / "db" / "odd_named.lance"
    ds = lance.write_dataset(batch(0, 200), str(odd), max_rows_per_file=50)
    ds.create_scalar_index("id", "BTREE", name=f"odd\n{FORGED}")
    lance.write_dataset(batch(200, 100), str(odd), mode="append", max_rows_per_file=50)  # unindexed rows

    # the driver's own log, as a Thrift server writes it: captured from Progress's log4j logger
    jvm = spark._jvm
    logger_name = "io.github.lancecompact.spark.engine.Progress"
    writer = jvm.java.io.StringWriter()
    layout = jvm.org.apache.logging.log4j.core.layout.PatternLayout.newBuilder().withPattern("%p %c: %m%n").build()
    appender = jvm.org.apache.logging.log4j.core.appender.WriterAppender.createAppender(
        layout, None, writer, "names-test", False, True)
    appender.start()
    level = jvm.org.apache.logging.log4j.Level
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger_name, level.INFO)
    core_logger = jvm.org.apache.logging.log4j.LogManager.getLogger(logger_name)
    core_logger.addAppender(appender)
    try:
        r, = optimize_indices(spark, "db.odd_named").collect()
    finally:
        core_logger.removeAppender(appender)
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger_name, level.ERROR)
    assert r.indices_optimized == 1 and r.rows_indexed == 100
    driver_log = writer.toString()
    assert "odd\\nINFO lance_compact.engine: forged line: building 100 rows" in driver_log, driver_log
    no_forged_line(driver_log)
    descriptions = [d for d in job_descriptions(spark) if "odd_named" in d]
    assert any("odd\\nINFO" in d for d in descriptions) and not any("\n" in d for d in descriptions), descriptions
    # its name is not dropped (a control character), the error says it escaped
    with pytest.raises(Exception) as e:
        spark.sql(f"CALL lance.drop_index(table => 'db.odd_named', name => {sql_string('odd' + chr(10) + FORGED)})").collect()
    assert "index name 'odd\\nINFO lance_compact.engine: forged line' is refused: it contains a control character" \
        in str(e.value)
    no_forged_line(str(e.value))
    text = engine_log(spark)
    assert "served optimize_indices" in text
    no_forged_line(text)


ACCEPTED_NAMES = ["n" * 128, "índice_名前", "with-dashes", "dots.in.side", "a b", "_one", "x__y", "a`b", "a,b",
                  "Ünïcödé", "CamelCase", "1st"]


def test_every_name_create_index_accepts_can_be_dropped(spark, named):
    """Each accepted edge name: built by CALL and dropped by DROP INDEX, built by CREATE INDEX
    and dropped by the PySpark API's drop_index; listed in between, the data unchanged."""
    from lance_compact import drop_index

    table, path = named
    expected = content(lance.dataset(str(path)))

    def names():
        return {r.name for r in spark.sql(f"SELECT name FROM lance.{table}.indices").collect()}

    for name in ACCEPTED_NAMES:
        spark.sql(f"CALL lance.create_index(table => '{table}', column => 'category', index_type => 'BITMAP', "
                  f"name => {sql_string(name)})").collect()
        assert name in names(), name
        assert spark.sql(f"DROP INDEX {backquoted(name)} ON lance.{table}").collect() == []
        assert names() == {"id_idx"}, name
        spark.sql(f"CREATE INDEX {backquoted(name)} ON lance.{table} USING BITMAP (category)").collect()
        assert name in names(), name
        r, = drop_index(spark, table, name=name).collect()
        assert r.name == name and names() == {"id_idx"}, name
    assert content(lance.dataset(str(path))) == expected


def test_an_index_pylance_named_oddly_can_be_dropped_but_not_lances_own(spark, warehouse):
    """pylance takes any name; each of the table's indices can be dropped by its exact name (not
    one with a control character: above), a user's __mine included. Lance's own fragment-reuse
    index (a deferred remap's) is refused, saying so."""
    from lance_compact import drop_index

    path = warehouse / "db" / "pylance_named.lance"
    ds = lance.write_dataset(batch(0, 400), str(path), max_rows_per_file=50)
    odd = ["__mine", "x/y", "..", " sp ", "z" * 5000, "zw\u200bj", "a\\b"]
    for name in odd:
        ds.create_scalar_index("id", "BTREE", name=name)
    ds.delete("id < 60")
    ds.optimize.compact_files(target_rows_per_fragment=200, defer_index_remap=True)
    ds = lance.dataset(str(path))
    assert "__lance_frag_reuse" in {i["name"] for i in ds.list_indices()}
    listed = {r.name for r in spark.sql("SELECT name FROM lance.db.pylance_named.indices").collect()}
    assert listed == set(odd)

    version = ds.version
    for what in (lambda: spark.sql("CALL lance.drop_index(table => 'db.pylance_named', name => '__lance_frag_reuse')"),
                 lambda: spark.sql("DROP INDEX __lance_frag_reuse ON lance.db.pylance_named")):
        with pytest.raises(Exception) as e:
            what().collect()
        assert "index '__lance_frag_reuse' is Lance's own system index (FragmentReuse), not a user's" in str(e.value)
        assert lance.dataset(str(path)).version == version

    for i, name in enumerate(odd):
        if i % 2:
            drop_index(spark, "db.pylance_named", name=name).collect()
        else:
            spark.sql(f"DROP INDEX {backquoted(name)} ON lance.db.pylance_named").collect()
    assert {i["name"] for i in lance.dataset(str(path)).list_indices()} == {"__lance_frag_reuse"}
