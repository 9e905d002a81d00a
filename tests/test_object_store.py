"""A warehouse on a real S3-compatible server (moto's, started by the tests on 127.0.0.1):
everything a local warehouse does, with credentials only ever passed as storage options,
and never shown: every log, error, plan row, result row and event log is grepped for them."""
import json
import os
import subprocess
import time
from pathlib import Path

import lance
import numpy as np
import pytest
from lance.file import LanceFileSession
from pyspark.errors import AnalysisException

import stress
from conftest import NO_CLEANUP_FLOOR, ROOT, lance_session
from oracle import content, degraded_table
from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY

SPARK_MASTER = "local[2,2]"
PLANTED = (ACCESS_KEY_ID, SECRET_ACCESS_KEY)


@pytest.fixture(scope="module")
def wh(s3):
    """A fresh bucket per module run: s3://<bucket>/wh."""
    return s3.fresh_bucket("lance") + "/wh"


@pytest.fixture(scope="module")
def spark(s3, wh, tmp_path_factory):
    assert not any(k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION", "AWS_ENDPOINT")) for k in os.environ), \
        "credentials and the endpoint must come from storage options"
    events = tmp_path_factory.mktemp("events")
    session = lance_session(SPARK_MASTER, "lance-compact-s3-tests", wh,
                            {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
                             "spark.eventLog.compress": "false", **NO_CLEANUP_FLOOR},
                            storage_options=s3.storage_options)
    session.events = events
    yield session
    session.stop()


def table(s3, wh, name, **kwargs):
    uri = f"{wh}/db/{name}.lance"
    degraded_table(uri, storage_options=s3.storage_options, **kwargs)
    return f"db.{name}", uri


def dataset(s3, uri, version=None):
    return lance.dataset(uri, version=version, storage_options=s3.storage_options)


def no_secrets(text: str, where: str) -> None:
    for planted in PLANTED:
        assert planted not in text, f"a planted credential appeared in {where}"


def test_namespaces_and_tables_are_listed(spark, s3, wh):
    table(s3, wh, "listed", fragments=4)
    spark.sql("CREATE NAMESPACE lance.empty_ns")
    assert {r[0] for r in spark.sql("SHOW NAMESPACES IN lance").collect()} >= {"db", "empty_ns"}
    assert "listed" in {r.tableName for r in spark.sql("SHOW TABLES IN lance.db").collect()}
    assert spark.sql("SHOW TABLES IN lance.empty_ns").collect() == []
    with pytest.raises(AnalysisException, match="SCHEMA_ALREADY_EXISTS.*empty_ns"):
        spark.sql("CREATE NAMESPACE lance.empty_ns")
    with pytest.raises(AnalysisException, match="SCHEMA_NOT_EMPTY.*db"):
        spark.sql("DROP NAMESPACE lance.db")
    spark.sql("DROP NAMESPACE lance.empty_ns")
    assert "empty_ns" not in {r[0] for r in spark.sql("SHOW NAMESPACES IN lance").collect()}
    with pytest.raises(AnalysisException, match="SCHEMA_NOT_FOUND.*nope"):
        spark.sql("SHOW TABLES IN lance.nope").collect()
    desc = {r[0]: r[1] for r in spark.sql("DESCRIBE NAMESPACE lance.db").collect()}
    assert desc.get("Location") == f"{wh}/db"


def test_compact_plan_layout_and_cleanup(spark, s3, wh):
    t, uri = table(s3, wh, "events")
    before = dataset(s3, uri)
    expected = content(before)
    plan = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300)").collect()
    assert plan and dataset(s3, uri).version == before.version
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300)").collect()[0]
    after = dataset(s3, uri)
    assert r.tasks == len(plan) and r.new_version == after.version
    assert len(after.get_fragments()) < len(before.get_fragments())
    assert content(after) == expected
    layout = spark.sql(f"CALL lance.describe_layout(table => '{t}')").collect()[0]
    assert layout.fragments == len(after.get_fragments()) and layout.last_compacted_version == after.version
    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', dry_run => true)").collect()[0]
    assert dry.dry_run and dry.old_versions >= 1 and dataset(s3, uri, before.version).count_rows()
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds')").collect()[0]
    assert done.old_versions == dry.old_versions
    with pytest.raises(ValueError, match=f"_versions/{before.version}.manifest was not found"):
        dataset(s3, uri, before.version)  # cleaned up
    assert content(dataset(s3, uri)) == expected
    for rows, where in ((plan, "plan rows"), ([r, layout, dry, done], "result rows")):
        no_secrets(json.dumps([x.asDict() for x in rows], default=str), where)


def test_cleanup_reads_the_age_of_unreferenced_files_on_the_store(spark, s3, wh):
    """delete_unverified on S3: an unreferenced data file (a writer's, before its commit) is
    kept while younger than unverified_min_age and removed once older, its age read from the
    store (Lance's own delete_unverified is not used then)."""
    from lance.fragment import write_fragments

    t, uri = table(s3, wh, "young_orphans")
    before = dataset(s3, uri)
    new = write_fragments(before.to_table(limit=5), uri, storage_options=s3.storage_options)
    orphan = {f.path for m in new for f in m.files}
    session = LanceFileSession(uri, s3.storage_options)

    def data_files():
        return {n.rsplit("/", 1)[-1] for n in session.list("data")}

    assert len(orphan) == 1 and orphan <= data_files()
    kept = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                     "delete_unverified => true, unverified_min_age => '1 hour')").collect()[0]
    assert kept.data_files_removed == 0 and orphan <= data_files()
    time.sleep(2)
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, "
                     "unverified_min_age => '1 seconds')").collect()[0]
    assert done.data_files_removed == 1 and done.bytes_removed > 0 and not orphan & data_files()
    assert content(dataset(s3, uri)) == content(before)


def test_partial_progress(spark, s3, wh):
    t, uri = table(s3, wh, "partial")
    before = dataset(s3, uri)
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                  "partial_progress => true, max_commits => 2)").collect()[0]
    assert r.tasks > 2 and r.commits == 2 and r.tasks_failed == 0
    assert content(dataset(s3, uri)) == content(before)


@pytest.mark.parametrize("carry", ["true", "false"])
def test_a_concurrent_delete_is_carried_over_or_replanned(spark, s3, wh, carry):
    t, uri = table(s3, wh, f"conflict_{carry}")
    before = dataset(s3, uri)
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                  "options => map('test_before_commit', 'writers.delete_in_first_fragment', "
                  f"'carry_over_deletes', '{carry}'))").collect()[0]
    after = dataset(s3, uri)
    if carry == "true":
        assert r.tasks_rebased == 1 and r.retries == 0 and r.commits == 2
        session = LanceFileSession(uri, s3.storage_options)  # no detached version left behind
        assert not [v for v in session.list("_versions") if v.rsplit("/", 1)[-1].startswith("d")]
    else:
        assert r.tasks_rebased == 0 and r.retries == 1 and r.commits == 2
    assert after.count_rows() == before.count_rows() - 5
    assert set(after.to_table(columns=["id"])["id"].to_pylist()) < set(before.to_table(columns=["id"])["id"].to_pylist())


def test_errors_are_clear_and_hold_no_secret(spark, s3, wh):
    with pytest.raises(AnalysisException, match=r"TABLE_OR_VIEW_NOT_FOUND.*db.*nope") as e:
        spark.sql("CALL lance.compact(table => 'db.nope')").collect()
    assert e.value.getSqlState() == "42P01"
    no_secrets(str(e.value), "an error")
    with pytest.raises(AnalysisException, match="s3://elsewhere/t.lance.*outside the warehouse") as e:
        spark.sql("CALL lance.compact(table => 's3://elsewhere/t.lance')").collect()  # escapes the warehouse
    no_secrets(str(e.value), "an error")


def test_stress_small_run(spark, s3, wh, tmp_path):
    summary: dict = {}
    stress.run(spark, f"{wh}/db/stress.lance", "db.stress", 0, 6, summary, tmp_path,
               storage_options=s3.storage_options)
    print(f"\nstress on S3: {summary}")
    assert summary["compactions"] >= 3


def test_spark_sql_on_the_object_store_shows_no_secret(s3, wh, tmp_path):
    """spark-sql through bin/lance-spark-sql: listing, CALLs and an error; its whole output,
    the engine's log and the event log hold no credential."""
    t, uri = table(s3, wh, "cli")
    before = dataset(s3, uri)
    storage = [a for k, v in s3.storage_options.items()
               for a in ("--conf", f"spark.sql.catalog.lance.storage.{k}={v}")]
    sql = (f"SHOW TABLES IN lance.db; CALL lance.compact(table => '{t}', target_rows_per_fragment => 300); "
           f"CALL lance.plan_compaction(table => '{t}'); CALL lance.describe_layout(table => '{t}'); "
           f"CALL lance.cleanup(table => '{t}', dry_run => true); CALL lance.compact(table => 'db.missing');")
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", wh, "--master", "local[2]", *storage,
         "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={tmp_path}",
         "--conf", "spark.eventLog.compress=false",
         "--conf", f"spark.lance.compact.engine.log={tmp_path / 'engine.log'}", "-e", sql],
        capture_output=True, text=True, timeout=600)
    assert "cli" in p.stdout and "TABLE_OR_VIEW_NOT_FOUND" in p.stderr, p.stderr[-3000:]
    assert content(dataset(s3, uri)) == content(before)
    assert len(dataset(s3, uri).get_fragments()) < len(before.get_fragments())
    no_secrets(p.stdout + p.stderr, "spark-sql's output")
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert "served compact" in (tmp_path / "engine.log").read_text()
    assert any("local-" in str(f.relative_to(tmp_path)) for f in files)  # the event log
    for f in files:
        no_secrets(f.read_text(errors="replace"), str(f))


def test_reads_and_metadata_tables(spark, s3, wh):
    t, uri = table(s3, wh, "readable", fragments=8)
    ds = dataset(s3, uri)
    assert spark.sql(f"SELECT count(*) FROM lance.{t}").collect()[0][0] == ds.count_rows()
    query = spark.sql(f"SELECT id FROM lance.{t} WHERE id < 100")
    got = sorted(r.id for r in query.collect())
    assert got == sorted(ds.to_table(columns=["id"], filter="id < 100")["id"].to_pylist())
    # read on the executors (the storage options travel with the read, shown nowhere)
    plan = query._jdf.queryExecution().toString()
    assert "(Python)" in plan
    no_secrets(plan, "a query plan")
    no_secrets("".join(r[0] for r in spark.sql(f"EXPLAIN EXTENDED SELECT * FROM lance.{t}").collect()),
               "EXPLAIN")
    assert [r.id for r in spark.sql(f"SELECT id FROM lance.{t}.fragments ORDER BY id").collect()] == \
        [f.fragment_id for f in ds.get_fragments()]
    assert [r.version for r in spark.sql(f"SELECT version FROM lance.{t}.versions ORDER BY version").collect()] == \
        [v["version"] for v in ds.versions()]


@pytest.mark.parametrize("index_type", ["IVF_PQ", "IVF_RQ"])
def test_create_index_on_spark_tasks(spark, s3, wh, index_type):
    """CALL lance.create_index on the object store: the model and the segments built by Spark
    tasks with the catalog's storage options (a test hook keeps the small table off the
    engine), the segments committed once as they are (pylance's merge there is round trips a
    segment), each fragment in exactly one; queries answer from the index, every row found once."""
    t, uri = table(s3, wh, f"indexed_{index_type.lower()}")
    before = dataset(s3, uri)
    sub = ", 'num_sub_vectors', '2'" if index_type == "IVF_PQ" else ""
    r = spark.sql(f"CALL lance.create_index(table => '{t}', column => 'vector', index_type => '{index_type}', "
                  f"options => map('num_partitions', '4'{sub}, 'rows_per_segment', '1000', "
                  "'test_task_sleep_ms', 'all:1'))").collect()[0]
    assert r.built_by == "spark tasks" and r.segments_built == r.segments_committed == len(r.groups) >= 2
    after = dataset(s3, uri)
    assert r.new_version == after.version == before.version + 1 and content(after) == content(before)
    segments, = [i.segments for i in after.describe_indices()]
    covered = [f for s in segments for f in s.fragment_ids]
    assert len(segments) == r.segments_committed and sorted(covered) == sorted(set(covered)) == \
        sorted(f.fragment_id for f in after.get_fragments())
    stats = after.stats.index_stats("vector_idx")
    assert stats["num_indexed_fragments"] == len(after.get_fragments()) and stats["num_unindexed_fragments"] == 0
    for q in after.to_table(columns=["vector"], limit=3)["vector"].to_numpy(zero_copy_only=False):
        exact = after.to_table(nearest={"column": "vector", "q": q, "k": 5, "use_index": False}, columns=["id"])
        ann = after.to_table(nearest={"column": "vector", "q": q, "k": 5, "nprobes": 4, "refine_factor": 100},
                             columns=["id"])
        assert ann["id"].to_pylist() == exact["id"].to_pylist()
    no_secrets(str(r), "the result row")


def test_ivf_flat_segments_kept_on_the_store_answer_as_pylance_index(spark, s3, wh):
    """An IVF_FLAT index built by Spark tasks on the store keeps its segments (one shared model;
    pylance's merge of them there is a round trip per partition per segment):
    every row in exactly one of them, so exhaustive searches answer as pylance's own index on
    the same data (ids and distances, deleted rows masked); optimize_indices then adds the
    appended rows as one more segment beside them."""
    from oracle import batch
    t, uri = table(s3, wh, "flat", fragments=100)
    _, mirror = table(s3, wh, "flat_pylance", fragments=100)  # the same rows and deletions (same seed)
    r = spark.sql(f"CALL lance.create_index(table => '{t}', column => 'vector', index_type => 'IVF_FLAT', "
                  "options => map('num_partitions', '4', 'rows_per_segment', '1000', 'test_task_sleep_ms', 'all:1'))"
                  ).collect()[0]
    assert r.segments_built == r.segments_committed == len(r.groups) >= 3
    theirs = dataset(s3, mirror)
    theirs.create_index("vector", index_type="IVF_FLAT", num_partitions=4)
    ours, theirs = dataset(s3, uri), dataset(s3, mirror)
    assert [len(i.segments) for i in ours.describe_indices()] == [r.segments_committed]
    assert ours.stats.index_stats("vector_idx")["num_unindexed_fragments"] == 0

    def answers(ds):
        qs = ds.to_table(columns=["vector"], limit=6)["vector"].to_numpy(zero_copy_only=False)
        return [ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4},
                            columns=["id"]).to_pydict() for q in qs]
    assert answers(ours) == answers(theirs)
    lance.write_dataset(batch(50_000, 200), uri, mode="append", storage_options=s3.storage_options)
    o = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
    assert {(i.segments_before, i.segments_after) for i in o.indices} == \
        {(r.segments_committed, r.segments_committed + 1)}, o
    after = dataset(s3, uri)
    q = after.to_table(columns=["vector"], filter="id = 50100")["vector"][0].values.to_numpy()
    exact = after.to_table(nearest={"column": "vector", "q": q, "k": 10, "use_index": False}, columns=["id"])
    found = after.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4}, columns=["id"])
    # the same rows; their distances equal to float32 rounding (the index's kernel and the
    # exhaustive scan's sum in different orders: 1.7158834 against 1.7158835 in one CI run)
    assert found["id"].to_pylist() == exact["id"].to_pylist()
    assert np.allclose(found["_distance"].to_numpy(), exact["_distance"].to_numpy(), rtol=1e-5, atol=0)


def test_index_statements_and_the_indices_table_on_the_store(spark, s3, wh):
    """CREATE INDEX, the indices table (segments' build times from the index metadata there) and
    DROP INDEX on the object store, with the catalog's storage options."""
    t, uri = table(s3, wh, "sql_indexed", fragments=8)
    before = dataset(s3, uri)
    spark.sql(f"CREATE INDEX id_idx ON lance.{t} USING BTREE (id)").collect()
    built = dataset(s3, uri)
    assert built.version == before.version + 1 and "ScalarIndexQuery" in built.scanner(filter="id = 7").explain_plan()
    row, = spark.sql(f"SELECT * FROM lance.{t}.indices").collect()
    assert (row.name, row.columns, row.segments, row.fragments_covered, row.fragments, row.unindexed_rows) == \
        ("id_idx", ["id"], 1, 8, 8, 0)
    created, = [s.created_at for d in built.describe_indices() for s in d.segments]
    # Lance keeps created_at in milliseconds in the manifest; the engine that committed the index
    # may still hold it to the microsecond (seen: .990143 there, .990 read back here)
    assert row.created_at == row.updated_at
    assert abs(row.created_at - created.astimezone().replace(tzinfo=None)).total_seconds() < 0.001
    assert "INDEX_NOT_FOUND" in str(pytest.raises(AnalysisException, spark.sql, f"DROP INDEX nope ON lance.{t}").value)
    spark.sql(f"DROP INDEX id_idx ON lance.{t}").collect()
    after = dataset(s3, uri)
    assert after.version == before.version + 2 and after.list_indices() == [] and content(after) == content(before)


def test_optimize_indices_adds_a_segment_on_the_store(spark, s3, wh):
    """optimize_indices on the object store: the index's model read back from its files there
    (IVF_PQ's codebook from the segment's auxiliary file, with the catalog's storage options),
    the appended rows built as a new segment beside the old ones (same UUIDs), queries exact."""
    from oracle import batch
    t, uri = table(s3, wh, "upkept", fragments=10)
    ds = dataset(s3, uri)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    old = {i["uuid"] for i in dataset(s3, uri).list_indices()}
    lance.write_dataset(batch(50_000, 200), uri, mode="append", storage_options=s3.storage_options)
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
    assert r.unindexed_fragments_before == 2 and r.unindexed_fragments_after == 0 and r.rows_indexed == 400, r
    assert {(i.segments_before, i.segments_after, i.segments_merged) for i in r.indices} == {(1, 2, 0)}
    after = dataset(s3, uri)
    assert old <= {i["uuid"] for i in after.list_indices()}
    for f in ["id = 50100", "id >= 49990", "id < 30"]:
        assert after.to_table(filter=f, columns=["id"]).sort_by("id") == \
            after.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")
    q = after.to_table(columns=["vector"], filter="id = 50100")["vector"][0].values.to_numpy()
    exact = after.to_table(nearest={"column": "vector", "q": q, "k": 5, "use_index": False}, columns=["id"])
    ann = after.to_table(nearest={"column": "vector", "q": q, "k": 5, "nprobes": 4, "refine_factor": 100},
                         columns=["id"])
    assert ann["id"].to_pylist() == exact["id"].to_pylist()
    no_secrets(str(r), "the result row")


def test_event_log_and_engine_log_hold_no_secret(spark):
    """Last in the module: everything above ran in this session."""
    logs = [f for f in Path(spark.events).rglob("*") if f.is_file()]
    assert logs, "no event log written"
    text = "".join(p.read_text(errors="replace") for p in logs)
    assert "spark.sql.catalog.lance.storage.aws_access_key_id" in text  # the setting is there...
    no_secrets(text, "the event log")  # ...its value is not
    engine = spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession)
    no_secrets(Path(engine.logFile().getPath()).read_text(errors="replace"), "the engine log")
