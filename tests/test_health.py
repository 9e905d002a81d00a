"""lance.system.table_health, lance.system.maintenance_history and table properties, from SQL:
a real Spark session over a small warehouse of tables in three namespaces on local disk
(healthy, degraded, indexed with unindexed appends, opted out, one broken, one in a namespace
named `system`) and a second catalog over moto's S3 server with one table."""
from __future__ import annotations

import math
from datetime import datetime
import os
import sys
import time

import lance
import pyarrow as pa
import pytest

from conftest import ROOT, refused
from oracle import degraded_table

CATALOG_SETTINGS = {"maintain.min_small_fragments": "4"}


def _small(uri: str, fragments: int, rows: int = 100, storage_options=None) -> None:
    for i in range(fragments):
        data = pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})
        lance.write_dataset(data, uri, mode="append" if i else "create", storage_options=storage_options)


@pytest.fixture(scope="module")
def tables(warehouse):
    for ns in ("db", "ops", "system"):
        (warehouse / ns).mkdir(exist_ok=True)
    _small(str(warehouse / "db" / "healthy.lance"), 1)
    degraded_table(str(warehouse / "db" / "degraded.lance"), fragments=20)
    indexed = str(warehouse / "ops" / "indexed.lance")
    _small(indexed, 2)
    lance.dataset(indexed).create_scalar_index("id", "BTREE")
    for j in range(3):
        lance.write_dataset(pa.table({"id": pa.array([10**6 + j], pa.int64())}), indexed, mode="append")
    degraded_table(str(warehouse / "ops" / "opted_out.lance"), fragments=12)
    _small(str(warehouse / "ops" / "small6.lance"), 6)
    _small(str(warehouse / "system" / "events.lance"), 1)
    broken = warehouse / "db" / "broken.lance" / "_versions"
    broken.mkdir(parents=True)
    (broken / "1.manifest").write_bytes(b"not a manifest" * 4)
    return {"db.healthy", "db.degraded", "ops.indexed", "ops.opted_out", "ops.small6", "system.events"}


@pytest.fixture(scope="module")
def lake(s3, tmp_path_factory):
    """An S3 warehouse: db.remote (degraded) and db.bad (a corrupt manifest)."""
    from lance.file import LanceFileSession

    bucket = f"health-{os.getpid()}-{int(time.time() * 1000) % 10**9}"
    wh = s3.create_bucket(bucket) + "/wh"
    degraded_table(f"{wh}/db/remote.lance", fragments=8, storage_options=s3.storage_options)
    garbage = tmp_path_factory.mktemp("garbage") / "1.manifest"
    garbage.write_bytes(b"not a manifest" * 4)
    LanceFileSession(f"{wh}/db/bad.lance/_versions", s3.storage_options).upload_file(str(garbage), "1.manifest")
    return wh


@pytest.fixture(scope="module")
def spark(warehouse, tables, lake, s3):
    """The `lance` catalog over the local warehouse (with a catalog-wide policy setting) and
    `lake` over the S3 one, in one session."""
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact
    from lance_compact.api import spark_conf

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT / "examples"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")] if p)
    builder = (SparkSession.builder.master("local[2]").appName("lance-compact-health-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    for k, v in CATALOG_SETTINGS.items():
        builder = builder.config(f"spark.sql.catalog.lance.{k}", v)
    for k, v in spark_conf(warehouse=lake, catalog="lake", storage_options=s3.storage_options).items():
        if k.startswith("spark.sql.catalog.lake"):
            builder = builder.config(k, v)
    session = configure_spark_with_lance_compact(builder, warehouse=str(warehouse)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def documented_score(row: dict) -> int:
    """The score of a table whose only due step is compaction, as docs/warehouse-health.md writes
    the formula (computed here independently of health.py)."""
    ideal = max(1, math.ceil(row["rows"] / row["target_rows_per_fragment"]))
    small = min(1.0, math.log2(row["fragments"] / ideal) / 10) if row["fragments"] > ideal else 0.0
    r = row["deleted_row_ratio"]
    return round(100 - max(1.0, 35 * small + 25 * 1.25 * r / (r + 0.25)))


def health(spark, catalog: str = "lance") -> dict[str, dict]:
    return {f"{r['namespace']}.{r['table']}": r.asDict()
            for r in spark.sql(f"SELECT * FROM {catalog}.system.table_health").collect()}


def maintain_due(spark, table: str, policy: dict) -> list[str]:
    """The steps CALL lance.maintain would run with the same thresholds (its dry run)."""
    args = ", ".join(f"{k} => {v!r}" if isinstance(v, str) else f"{k} => {v}" for k, v in policy.items())
    rows = spark.sql(f"CALL lance.maintain(table => '{table}', {args}, dry_run => true)").collect()
    return [r.step for r in rows if r.reason.startswith("due")]


def test_every_table_has_a_row_and_the_broken_one_says_why(spark, tables):
    rows = health(spark)
    assert set(rows) == tables | {"db.broken"}
    broken = rows["db.broken"]
    assert broken["health_score"] is None and broken["due"] is None
    assert "db.broken" in broken["error"] and "corrupt or unreadable file" in broken["error"], broken["error"]
    for name in tables:
        assert rows[name]["error"] is None and 0 <= rows[name]["health_score"] <= 100, name
    assert rows["db.healthy"]["health_score"] == 100 and rows["db.healthy"]["due"] == []
    assert rows["db.degraded"]["due"] == ["compact"] and rows["db.degraded"]["deleted_rows"] > 0
    d = rows["db.degraded"]  # the documented formula (docs/warehouse-health.md)
    assert d["health_score"] == documented_score(d)
    assert d["health_score"] < rows["system.events"]["health_score"] == 100
    assert rows["ops.indexed"]["due"] == ["compact", "optimize_indices"]  # 5 small fragments, 3 unindexed
    assert rows["ops.indexed"]["health_score"] == round(100 - 35 * math.log2(5 / 1) / 10 - 25 * 3 / 5)
    assert rows["ops.indexed"]["unindexed_fragments"] == 3
    # 3 appended fragments of 1 row each, one segment
    assert (rows["ops.indexed"]["unindexed_rows"], rows["ops.indexed"]["index_segments"]) == (3, 1)
    assert [tuple(i)[:5] for i in rows["ops.indexed"]["indices"]] == [("id_idx", "BTree", 3, 3, 1)]
    assert all(isinstance(i["built_at"], datetime) for i in rows["ops.indexed"]["indices"])  # its age
    assert rows["db.degraded"]["reasons"]["compact"].startswith("due: 20 fragments under 1,048,576 rows")
    # The catalog setting (4) applies: six small fragments make compaction due.
    assert rows["ops.small6"]["due"] == ["compact"]


def test_sql_filters_orders_and_joins_it(spark, tables):
    from lance_compact.options import result_columns

    for name, section in (("table_health", "health_columns"), ("maintenance_history", "history_columns")):
        described = [r.col_name for r in spark.sql(f"DESCRIBE TABLE lance.system.{name}").collect()]
        assert described == [c for c, _ in result_columns(section)]
    ordered = [r[0] for r in spark.sql(
        "SELECT concat(namespace, '.', `table`) FROM lance.system.table_health "
        "WHERE error IS NULL AND array_contains(due, 'compact') ORDER BY health_score, `table`").collect()]
    rows = health(spark)
    assert ordered == sorted((n for n in tables if "compact" in rows[n]["due"]),
                             key=lambda n: (rows[n]["health_score"], n.split(".")[1]))
    joined = spark.sql("SELECT h.health_score, count(*) AS versions FROM lance.system.table_health h "
                       "JOIN lance.system.maintenance_history m USING (namespace, `table`) "
                       "WHERE namespace = 'db' AND `table` = 'degraded' GROUP BY h.health_score").collect()
    assert [tuple(r) for r in joined] == [(rows["db.degraded"]["health_score"], rows["db.degraded"]["versions"])]


def test_due_steps_are_maintains(spark, tables):
    rows = health(spark)
    policy = {"min_small_fragments": int(CATALOG_SETTINGS["maintain.min_small_fragments"])}
    for name in sorted(tables):
        assert rows[name]["due"] == maintain_due(spark, name, policy), name


def test_describe_layout_shows_the_same_health(spark, tables):
    rows = health(spark)
    for name in ("db.degraded", "ops.indexed", "db.healthy"):
        layout = spark.sql(f"CALL lance.describe_layout(table => '{name}')").collect()[0]
        assert (layout.health_score, layout.due) == (rows[name]["health_score"], rows[name]["due"])


def test_properties_round_trip(spark, warehouse, tables):
    path = str(warehouse / "ops" / "opted_out.lance")
    version = lance.dataset(path).version
    spark.sql("ALTER TABLE lance.ops.opted_out SET TBLPROPERTIES ('lance_compact.maintain.enabled'='false', "
              "'lance_compact.maintain.priority'='5', 'lance.compaction.target_rows_per_fragment'='500')")
    assert lance.dataset(path).version == version + 1
    assert lance.dataset(path).config() == {"lance_compact.maintain.enabled": "false",
                                            "lance_compact.maintain.priority": "5",
                                            "lance.compaction.target_rows_per_fragment": "500"}
    shown = {r.key: r.value for r in spark.sql("SHOW TBLPROPERTIES lance.ops.opted_out").collect()}
    assert shown["lance_compact.maintain.enabled"] == "false"
    assert shown["lance.compaction.target_rows_per_fragment"] == "500"
    row = health(spark)["ops.opted_out"]
    assert (row["enabled"], row["priority"], row["target_rows_per_fragment"]) == (False, 5, 500)
    spark.sql("ALTER TABLE lance.ops.opted_out UNSET TBLPROPERTIES ('lance_compact.maintain.priority', "
              "'lance.compaction.target_rows_per_fragment')")
    assert lance.dataset(path).config() == {"lance_compact.maintain.enabled": "false"}
    row = health(spark)["ops.opted_out"]
    assert (row["enabled"], row["priority"], row["target_rows_per_fragment"]) == (False, 0, 1048576)
    # a table property beats the catalog setting: 10 small fragments needed, six is not enough
    spark.sql("ALTER TABLE lance.ops.small6 SET TBLPROPERTIES ('lance_compact.maintain.min_small_fragments'='10')")
    assert health(spark)["ops.small6"]["due"] == []
    spark.sql("ALTER TABLE lance.ops.small6 UNSET TBLPROPERTIES ('lance_compact.maintain.min_small_fragments')")
    assert health(spark)["ops.small6"]["due"] == ["compact"]


@pytest.mark.parametrize("statement,match", [
    ("SET TBLPROPERTIES ('lance.auto_cleanup.interval'='5')", "cannot set table property 'lance.auto_cleanup.interval'.*valid keys are: lance_compact.maintain.enabled"),
    ("SET TBLPROPERTIES ('lance_compact.maintain.min_small_fragments'='x')",
     "table property lance_compact.maintain.min_small_fragments expects an integer, got 'x'"),
    ("SET TBLPROPERTIES ('lance_compact.maintain.nope'='1')", "cannot set table property 'lance_compact.maintain.nope'"),
    ("ADD COLUMN c INT", "ALTER TABLE only sets or unsets the table's maintenance properties"),
    ("RENAME TO lance.db.other", "rename"),
])
def test_bad_changes_are_refused_and_write_nothing(spark, warehouse, tables, statement, match):
    with refused(warehouse / "db" / "healthy.lance", match):
        spark.sql(f"ALTER TABLE lance.db.healthy {statement}")


def test_history_agrees_with_versions(spark, warehouse, tables):
    spark.sql("CALL lance.compact(table => 'db.degraded')").collect()
    spark.sql("ALTER TABLE lance.db.degraded SET TBLPROPERTIES ('lance_compact.maintain.priority'='1')")
    history = spark.sql("SELECT * FROM lance.system.maintenance_history").collect()
    assert {f"{r.namespace}.{r.table}" for r in history} == tables | {"db.broken"}
    assert [r.error for r in history if r.table == "broken"][0].startswith("table db.broken")
    for name in sorted(tables):
        ns, t = name.split(".")
        versions = [tuple(r) for r in spark.sql(
            f"SELECT version, timestamp, operation, fragments, rows, fragments_removed, fragments_added "
            f"FROM lance.{name}.versions ORDER BY version").collect()]
        mine = [tuple(r) for r in spark.sql(
            "SELECT version, timestamp, operation, fragments, rows, fragments_removed, fragments_added "
            f"FROM lance.system.maintenance_history WHERE namespace = '{ns}' AND `table` = '{t}' "
            "ORDER BY version").collect()]
        assert mine == versions and versions, name
    degraded = {r.version: r for r in history if r.table == "degraded"}
    last = max(degraded)
    assert (degraded[last].operation, degraded[last].kind, degraded[last].maintenance) == ("UpdateConfig", "policy", True)
    assert degraded[last].details == "set lance_compact.maintain.priority=1"
    rewrite = degraded[last - 1]
    assert (rewrite.operation, rewrite.kind, rewrite.maintenance) == ("Rewrite", "compaction", True)
    assert rewrite.details == (f"compaction: {rewrite.fragments_removed} fragments -> {rewrite.fragments_added}, "
                               f"{rewrite.rows} rows") and rewrite.fragments_removed == 20
    assert degraded[1].kind == "write" and degraded[1].maintenance is False
    indexed = [r for r in history if r.table == "indexed" and r.kind == "index"]
    assert [r.details for r in indexed] == ["index id_idx built: covers 2 fragments"]
    assert health(spark)["db.degraded"]["last_compacted_version"] == rewrite.version


def test_python_calls_naming_a_missing_table_raise(spark, tables):
    """table_health, history and LanceTable.for_name name a table: one that does not exist is
    an error naming it and the catalog (and the near name), not an empty DataFrame an alert on
    health_score < 50 would read as healthy; a broken table still has its row; SQL filtering
    the system table on a missing table keeps SQL's answer (no rows)."""
    from lance_compact import LanceTable, TableNotFoundError, history, table_health

    with pytest.raises(TableNotFoundError) as e:
        table_health(spark, "db.degarded")
    assert str(e.value) == ("[LANCE_TABLE_NOT_FOUND] table db.degarded does not exist in catalog lance "
                            "(did you mean 'db.degraded'?)")
    assert (e.value.table, e.value.catalog) == ("db.degarded", "lance")
    with pytest.raises(TableNotFoundError, match=r"table db\.nope does not exist in catalog lance \(namespace db "
                                                 r"has 3 tables: broken, degraded, healthy\)"):
        history(spark, "db.nope")
    with pytest.raises(TableNotFoundError, match=r"table lake\.db\.nope does not exist in catalog lance: its "
                                                 r"namespace lake\.db does not exist"):
        LanceTable.for_name(spark, "lake.db.nope")
    with pytest.raises(TableNotFoundError, match=r"table db\.remot does not exist in catalog lake \(did you mean "
                                                 r"'db\.remote'\?\)"):
        LanceTable.for_name(spark, "db.remot", catalog="lake")
    with pytest.raises(TableNotFoundError, match=r"namespace dbs does not exist \(did you mean 'db'\?\)"):
        table_health(spark, "lance.dbs.degraded")
    assert table_health(spark, "db.broken").collect()[0].error  # there, unreadable: its row says why
    assert [r.health_score for r in LanceTable.for_name(spark, "db.degraded").health().collect()] == \
        [health(spark)["db.degraded"]["health_score"]]
    assert history(spark, "lance.ops.indexed").count() > 0
    assert spark.sql("SELECT * FROM lance.system.table_health WHERE namespace = 'db' AND `table` = 'nope'").count() == 0


def test_namespace_named_system_stays_reachable(spark, tables):
    assert spark.sql("SELECT count(*) FROM lance.system.events").collect()[0][0] == 100
    assert "events" in {r.tableName for r in spark.sql("SHOW TABLES IN lance.system").collect()}


def test_object_store_warehouse(spark, lake, s3):
    from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY

    rows = health(spark, "lake")
    assert set(rows) == {"db.remote", "db.bad"}
    remote = rows["db.remote"]
    assert remote["error"] is None and remote["due"] == ["compact"] and remote["health_score"] < 100
    bad = rows["db.bad"]["error"]
    assert bad.startswith("table db.bad: ") and rows["db.bad"]["health_score"] is None
    assert ACCESS_KEY_ID not in bad and SECRET_ACCESS_KEY not in bad
    history = spark.sql("SELECT version, operation FROM lake.system.maintenance_history "
                        "WHERE `table` = 'remote'").collect()
    assert [r.version for r in history] == list(range(1, remote["version"] + 1))
    assert [tuple(r) for r in spark.sql("SELECT version, operation FROM lake.db.remote.versions").collect()] \
        == [tuple(r) for r in history]
