"""The clustering kept with the table (``lance_compact.cluster_by``): ALTER TABLE ... CLUSTER BY
(a, b) / CLUSTER BY NONE, SET / UNSET TBLPROPERTIES, SHOW TBLPROPERTIES and DESCRIBE TABLE
EXTENDED, bad values refused with the version unchanged, and compact, plan_compaction,
maintain and maintain_warehouse clustering a table that has one unless told
``sort_order => 'none'``. Real Spark, real Lance tables; one session."""
from __future__ import annotations

import re

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import refused
from lance_compact import maintain
from test_clustering import content, make_table, rows

KEY = "lance_compact.cluster_by"


def props(spark, table: str) -> dict:
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES lance.{table}").collect()}


def config(uri: str) -> dict:
    return dict(lance.dataset(uri).config() or {})


def in_order(uri: str, keys) -> bool:
    t = lance.dataset(uri).to_table(columns=[k for k, _, _ in keys])
    return pc.sort_indices(t, sort_keys=keys).to_pylist() == list(range(t.num_rows))


def test_cluster_by_sets_and_clears_the_property(spark, warehouse):
    uri = make_table(warehouse, "cb", fragments=3, indices=False)
    spark.sql("ALTER TABLE lance.db.cb CLUSTER BY (tenant, ts)")  # several columns: a Hilbert curve
    assert config(uri)[KEY] == "hilbert(tenant, ts)"
    assert props(spark, "db.cb")[KEY] == "hilbert(tenant, ts)"
    described = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE EXTENDED lance.db.cb").collect()}
    assert "# Clustering Information" in described, described
    assert described.get("tenant") and described.get("ts")

    spark.sql("ALTER TABLE lance.db.cb CLUSTER BY (tenant)")  # one column: a linear sort by it
    assert config(uri)[KEY] == "tenant ASC NULLS FIRST"

    spark.sql("ALTER TABLE lance.db.cb CLUSTER BY NONE")
    assert KEY not in config(uri) and KEY not in props(spark, "db.cb")
    described = [r.col_name for r in spark.sql("DESCRIBE TABLE EXTENDED lance.db.cb").collect()]
    assert "# Clustering Information" not in described


def test_set_and_unset_tblproperties(spark, warehouse):
    uri = make_table(warehouse, "cbset", fragments=2, indices=False)
    spark.sql(f"ALTER TABLE lance.db.cbset SET TBLPROPERTIES ('{KEY}' = 'zorder(tenant, `ts`)')")
    assert props(spark, "db.cbset")[KEY] == "zorder(tenant, ts)"
    spark.sql(f"ALTER TABLE lance.db.cbset SET TBLPROPERTIES ('{KEY}' = 'ts desc')")
    assert props(spark, "db.cbset")[KEY] == "ts DESC NULLS LAST"
    spark.sql(f"ALTER TABLE lance.db.cbset UNSET TBLPROPERTIES ('{KEY}')")
    assert KEY not in config(uri)


@pytest.fixture(scope="module")
def odd(warehouse):
    uri = str(warehouse / "db" / "cbodd.lance")
    t = rows(0, 100, 1).append_column("point", pa.array([{"x": 1, "y": 2}] * 100))
    lance.write_dataset(t, uri)
    return uri


@pytest.mark.parametrize("statement, match", [
    (f"SET TBLPROPERTIES ('{KEY}' = 'nope')", f"table property {KEY} column 'nope' does not exist"),
    (f"SET TBLPROPERTIES ('{KEY}' = 'vector')", "'vector' is a vector"),
    (f"SET TBLPROPERTIES ('{KEY}' = 'zorder(tenant)')", "zorder needs at least two columns"),
    (f"SET TBLPROPERTIES ('{KEY}' = 'tenant ASC DESC')", "is not 'column"),
    (f"SET TBLPROPERTIES ('{KEY}' = 'point')", "'point' is a nested column"),
    ("SET TBLPROPERTIES ('lance_compact.clustering.fragments' = '{}')", "clustering's own record"),
    ("CLUSTER BY (nope)", "CLUSTER BY column 'nope' does not exist"),
    ("CLUSTER BY (tenant, vector)", "CLUSTER BY column 'vector' is a vector"),
    ("CLUSTER BY (point.x)", "'point.x' is a nested field"),
])
def test_bad_clusterings_are_refused(spark, odd, statement, match):
    with refused(odd, match):
        spark.sql(f"ALTER TABLE lance.db.cbodd {statement}")
    assert KEY not in config(odd)


def test_compact_and_plan_use_the_tables_clustering(spark, warehouse):
    uri = make_table(warehouse, "cbrun", fragments=6, indices=False)
    expected = content(lance.dataset(uri))
    spark.sql("ALTER TABLE lance.db.cbrun CLUSTER BY (tenant)")
    plan = spark.sql("CALL lance.plan_compaction(table => 'db.cbrun', target_rows_per_fragment => 1000)").collect()
    assert len(plan) == 1 and "cluster by tenant ASC NULLS FIRST" in plan[0].reason
    plain = spark.sql("CALL lance.plan_compaction(table => 'db.cbrun', target_rows_per_fragment => 1000, "
                      "sort_order => 'none')").collect()
    assert all("cluster by" not in (p.reason or "") for p in plain)

    r = spark.sql("CALL lance.compact(table => 'db.cbrun', target_rows_per_fragment => 1000)").collect()[0]
    assert r.strategy == "clustering" and r.sort_order == "tenant ASC NULLS FIRST"
    assert content(lance.dataset(uri)) == expected
    assert in_order(uri, [("tenant", "ascending", "at_start")])

    # A run option a clustering cannot honour: the error says the order is the table's and how to skip it.
    with refused(uri, "is the table's clustering.*sort_order => 'none'"):
        spark.sql("CALL lance.compact(table => 'db.cbrun', strategy => 'io_bounded')").collect()
    # sort_order => 'none': a plain compaction, the property stays.
    lance.write_dataset(rows(10_000, 50, 9), uri, mode="append")
    lance.write_dataset(rows(10_050, 50, 10), uri, mode="append")
    r = spark.sql("CALL lance.compact(table => 'db.cbrun', sort_order => 'none')").collect()[0]
    assert r.strategy != "clustering" and r.sort_order is None and r.fragments_removed >= 2
    assert config(uri)[KEY] == "tenant ASC NULLS FIRST"


def test_maintain_and_maintain_warehouse_cluster(spark, warehouse):
    uri = make_table(warehouse, "cbmaint", fragments=20, per=50, indices=False)
    expected = content(lance.dataset(uri))
    spark.sql("ALTER TABLE lance.db.cbmaint CLUSTER BY (ts)")
    out = {r.step: r for r in maintain(spark, "db.cbmaint", target_rows_per_fragment=300,
                                       older_than="36500 days").collect()}
    assert out["compact"].ran, out["compact"]
    assert content(lance.dataset(uri)) == expected
    assert in_order(uri, [("ts", "ascending", "at_start")])

    # maintain_warehouse: a table with small fragments again; sort_order => 'none' compacts it plainly,
    # the default clusters it by its own clustering.
    for i in range(20):
        lance.write_dataset(rows(20_000 + i * 20, 20, 100 + i), uri, mode="append")
    expected = content(lance.dataset(uri))
    wh = spark.sql("CALL lance.maintain_warehouse(namespace => 'db', sort_order => 'none', "
                   "min_small_fragments => 10, older_than => '36500 days', exclude => "
                   "'db.cb,db.cbset,db.cbodd,db.cbrun')").collect()
    step = [r for r in wh if r.table == "db.cbmaint" and r.step == "compact"][0]
    assert step.ran and step.error is None, step
    assert content(lance.dataset(uri)) == expected
    assert not in_order(uri, [("ts", "ascending", "at_start")])  # appended rows, not clustered
    for i in range(20):
        lance.write_dataset(rows(40_000 + i * 20, 20, 200 + i), uri, mode="append")
    expected = content(lance.dataset(uri))
    wh = spark.sql("CALL lance.maintain_warehouse(namespace => 'db', min_small_fragments => 10, "
                   "target_rows_per_fragment => 500, older_than => '36500 days', "
                   "exclude => 'db.cb,db.cbset,db.cbodd,db.cbrun')").collect()
    step = [r for r in wh if r.table == "db.cbmaint" and r.step == "compact"][0]
    assert step.ran and step.error is None, step
    assert content(lance.dataset(uri)) == expected
    assert in_order(uri, [("ts", "ascending", "at_start")])


def test_maintain_max_rewrite_bytes_is_the_clustering_runs_budget(spark, warehouse):
    uri = make_table(warehouse, "cbbudget", fragments=20, per=50, indices=False)
    expected = content(lance.dataset(uri))
    spark.sql("ALTER TABLE lance.db.cbbudget CLUSTER BY (tenant, ts)")
    one = max(sum(d.file_size_bytes for d in f.metadata.data_files()) for f in lance.dataset(uri).get_fragments())
    out = {r.step: r for r in maintain(spark, "db.cbbudget", target_rows_per_fragment=300, max_rewrite_bytes=one * 5,
                                       older_than="36500 days").collect()}
    step = out["compact"]
    left = re.search(r"(\d+) fragments left for later", step.outcome or "")
    assert step.ran and left and 12 <= int(left.group(1)) <= 15, step  # about 5 of 20 within the budget
    assert content(lance.dataset(uri)) == expected
    share = spark.sql("CALL lance.describe_layout(table => 'db.cbbudget')").collect()[0].unclustered_row_share
    assert 0.5 < share < 1.0


def test_quoted_column_names(spark, warehouse):
    """Names that need back-quotes survive CLUSTER BY, the property and DESCRIBE's reading of it."""
    uri = str(warehouse / "db" / "cbquoted.lance")
    lance.write_dataset(pa.table({"a b": [3, 1, 2], "x-y": ["x", "y", "z"], "c": [1.0, 2.0, 3.0]}), uri)
    spark.sql("ALTER TABLE lance.db.cbquoted CLUSTER BY (`a b`, `x-y`)")
    assert config(uri)[KEY] == "hilbert(`a b`, `x-y`)"
    described = [r.col_name for r in spark.sql("DESCRIBE TABLE EXTENDED lance.db.cbquoted").collect()]
    at = described.index("# Clustering Information")
    assert "`a b`" in described[at:] and "`x-y`" in described[at:], described[at:]
    r = spark.sql("CALL lance.compact(table => 'db.cbquoted')").collect()[0]
    assert r.sort_order == "hilbert(`a b`, `x-y`)" and lance.dataset(uri).count_rows() == 3


def test_clustering_decay_makes_a_table_due(spark, warehouse):
    """A clustered table whose appends leave under 10% of its rows unclustered, but make a key
    lookup read several times the fragments it read right after clustering, is due, scores below
    100, and scores the same in table_health and maintain_warehouse at one moment; maintain then
    brings the depth back down."""
    uri = make_table(warehouse, "cbdecay", fragments=8, per=500, indices=False)
    spark.sql("ALTER TABLE lance.db.cbdecay CLUSTER BY (tenant)")
    spark.sql("CALL lance.compact(table => 'db.cbdecay', target_rows_per_fragment => 500)").collect()

    def health():
        return spark.sql("SELECT health_score, due, clustering_depth, unclustered_row_share, reasons "
                         "FROM lance.system.table_health WHERE namespace = 'db' AND table = 'cbdecay'").collect()[0]

    fresh = health()
    assert fresh.clustering_depth < 2 and fresh.health_score == 100 and fresh.due == [], fresh
    for i in range(5):  # 5 x 20 rows: 2.7% of the rows, each in a fragment of its own
        lance.write_dataset(rows(90_000 + i * 20, 20, 300 + i), uri, mode="append")
    decayed = health()
    assert decayed.unclustered_row_share < 0.1, decayed
    assert decayed.clustering_depth > 4 and decayed.due == ["compact"], decayed
    assert "clustering depth" in decayed.reasons["compact"] and "above 4" in decayed.reasons["compact"], decayed
    assert decayed.health_score < 100, decayed
    before = [r for r in spark.sql("CALL lance.maintain_warehouse(namespace => 'db', dry_run => true)").collect()
              if r.table == "db.cbdecay"]
    assert before and {r.health_before for r in before} == {decayed.health_score}, before
    # the call's thresholds decide what runs, not the number: still table_health's score
    other = [r for r in spark.sql("CALL lance.maintain_warehouse(namespace => 'db', dry_run => true, "
                                  "target_rows_per_fragment => 100, min_small_fragments => 2)").collect()
             if r.table == "db.cbdecay"]
    assert other and {r.health_before for r in other} == {decayed.health_score}, other

    # a higher max_clustering_depth (call or table property) leaves it alone
    out = {r.step: r for r in maintain(spark, "db.cbdecay", max_clustering_depth=50.0, dry_run=True).collect()}
    assert not out["compact"].ran and out["compact"].reason.startswith("not due"), out["compact"]
    out = {r.step: r for r in maintain(spark, "db.cbdecay", target_rows_per_fragment=500).collect()}
    assert out["compact"].ran, out["compact"]
    after = health()
    assert after.clustering_depth < decayed.clustering_depth - 3 and after.due == [], after


def test_icebergs_strategy_names(spark, warehouse):
    """strategy => 'binpack' and 'sort' mean what they mean in Iceberg's rewrite_data_files: a
    plain compaction (even of a clustered table) and a clustering run by the sort_order given or
    the table's CLUSTER BY; what cannot hold is refused with the version unchanged."""
    uri = make_table(warehouse, "cbice", fragments=6, per=100, indices=False)
    expected = content(lance.dataset(uri))
    with refused(uri, "strategy 'sort' .* needs a sort_order or the table's clustering"):
        spark.sql("CALL lance.compact(table => 'db.cbice', strategy => 'sort')").collect()
    with refused(uri, "strategy 'binpack' merges fragments without reordering rows"):
        spark.sql("CALL lance.compact(table => 'db.cbice', strategy => 'binpack', sort_order => 'tenant')").collect()
    row = spark.sql("CALL lance.compact(table => 'db.cbice', strategy => 'sort', sort_order => 'ts')").collect()[0]
    assert row.sort_order is not None and row.sort_order.startswith("ts"), row
    assert in_order(uri, [("ts", "ascending", "at_start")]) and content(lance.dataset(uri)) == expected

    spark.sql("ALTER TABLE lance.db.cbice CLUSTER BY (tenant)")
    for i in range(3):
        lance.write_dataset(rows(50_000 + i * 10, 10, 400 + i), uri, mode="append")
    expected = content(lance.dataset(uri))
    plain = spark.sql("CALL lance.compact(table => 'db.cbice', strategy => 'binpack')").collect()[0]
    assert plain.sort_order is None and plain.strategy == "default" and plain.tasks > 0, plain
    assert content(lance.dataset(uri)) == expected
    for i in range(3):
        lance.write_dataset(rows(60_000 + i * 10, 10, 500 + i), uri, mode="append")
    clustered = spark.sql("CALL lance.compact(table => 'db.cbice', strategy => 'sort')").collect()[0]
    assert clustered.sort_order is not None and clustered.sort_order.startswith("tenant"), clustered
