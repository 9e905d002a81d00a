"""Incremental clustering (state.py, plan.select_incremental): the record of clustered fragments
and their key ranges kept in the table's config, depth and the unclustered share in
describe_layout and system.table_health, runs that cluster only what is unclustered or
overlapping, depth converging with appends between runs (every row once, exact values, after
every round), budgets, ``full => true``, and the record surviving a plain compaction and cleanup.
Real Spark, real Lance tables; one session."""
from __future__ import annotations

import json

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_compact.compaction.clustering.plan import MAX_LAYERS, layers, tiered
from lance_compact.compaction.clustering.state import STATE_KEY, ClusteringState, components, depth
from conftest import NO_VERSION_FLOOR
from test_clustering import rows

SPARK_CONF = NO_VERSION_FLOOR  # the operator's: a test cleans up versions seconds old


def test_depth_definition():
    assert depth([], 0) == 0.0 and depth([], 5) == 5.0  # 5 unclustered fragments: any key in any of them
    assert depth([(0, 9), (10, 19), (20, 29)], 0) == 1.0  # disjoint ranges
    assert depth([(0, 9), (0, 9)], 0) == 2.0
    assert depth([(0, 9), (5, 14)], 1) == pytest.approx(1 + (5 + 2 * 5 + 5) / 15)
    assert components({1: (0, 9), 2: (5, 14), 3: (20, 29), 4: (28, 30)}) == [[1, 2], [3, 4]]
    assert components({1: (0, 9), 2: (9, 14)}) == [[1], [2]]  # a shared end key only (a heavy key split)


def test_size_tiered_choice():
    """New rows form a layer of their own; an earlier layer is merged once it is no bigger than
    what is being clustered; layers beyond MAX_LAYERS are merged smallest first."""
    full = (0, 999)
    ranges = {1: (0, 249), 2: (250, 499), 3: (500, 749), 4: (750, 999), 5: (0, 499), 6: (500, 999),
              10: full, 11: full}
    rows = {1: 500, 2: 500, 3: 500, 4: 500, 5: 150, 6: 150, 10: 100, 11: 100}
    assert layers([1, 2, 3, 4, 5, 6], ranges) == [[1, 2, 3, 4], [5, 6]]
    assert tiered([1, 2, 3, 4, 10, 11], {10, 11}, ranges, rows) == [10, 11]  # 2,000 rows stay
    rows.update({5: 100, 6: 100})
    assert tiered([1, 2, 3, 4, 5, 6, 10, 11], {10, 11}, ranges, rows) == [5, 6, 10, 11]
    assert tiered([1, 2, 3, 4, 5, 6], set(), ranges, rows) == []  # nothing new: layers stay
    many = {i: (0, 999) for i in range(20, 20 + MAX_LAYERS + 1)}
    got = tiered(list(many), set(), many, {i: 10 * 4 ** (i - 20) for i in many})
    assert got == [20, 21]  # one layer too many: the two smallest merged


@pytest.mark.parametrize("text", ["{", '{"v":1}', '{"order":"a","domain":["!!"],"fragments":{}}',
                                  '{"order":"a","domain":["AAAA"],"fragments":{}}',
                                  '{"order":"a","domain":[],"fragments":{"1":[5,1]}}'])
def test_an_unreadable_record_counts_as_none(text):
    """A record written by hand (pylance's update_config) is ignored, not trusted: every
    fragment then counts as unclustered, which is safe."""
    assert ClusteringState.from_config({STATE_KEY: text}) is None


def layout(spark, table: str):
    return spark.sql(f"CALL lance.describe_layout(table => '{table}')").collect()[0]


def health(spark, name: str):
    return spark.sql(f"SELECT cluster_by, clustering_depth, unclustered_row_share FROM lance.system.table_health "
                     f"WHERE namespace = 'inc' AND `table` = '{name}'").collect()[0]


def append(uri: str, start: int, seed: int, n: int = 300, tenants: int = 40) -> pa.Table:
    t = rows(start, n, seed)
    if tenants != 40:
        t = t.set_column(1, "tenant", pa.array(np.random.default_rng(seed).integers(0, tenants, n)))
    lance.write_dataset(t, uri, mode="append")
    return t


def assert_exact(uri: str, expected: list[pa.Table]) -> None:
    """Every row once, every column exact (the vector too)."""
    got = lance.dataset(uri).to_table().sort_by("id")
    want = pa.concat_tables(expected).sort_by("id")
    assert got.num_rows == want.num_rows and got.equals(want)


@pytest.mark.parametrize("cluster_by, name", [("(tenant, ts)", "hilbert"), ("(ts)", "linear")])
def test_depth_converges_with_appends_between_runs(spark, warehouse, cluster_by, name):
    uri = str(warehouse / "inc" / f"{name}.lance")
    expected = []
    for i in range(4):
        t = rows(i * 300, 300, i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql(f"ALTER TABLE lance.inc.{name} CLUSTER BY {cluster_by}")
    first = layout(spark, f"inc.{name}")
    assert first.clustering_depth == 4.0 and first.unclustered_row_share == 1.0  # nothing clustered yet

    depths = []
    for round_ in range(4):
        for j in range(3):  # appends between runs: 3 new fragments of random keys
            expected.append(append(uri, 10_000 * (round_ + 1) + j * 300, 100 * round_ + j))
        before = layout(spark, f"inc.{name}")
        fragments = len(lance.dataset(uri).get_fragments())
        assert before.unclustered_row_share > 0 and before.clustering_depth >= 3
        r = spark.sql(f"CALL lance.compact(table => 'inc.{name}', target_rows_per_fragment => 600)").collect()[0]
        assert r.strategy == "clustering" and r.commits >= 2 and r.fragments_left == 0  # the Rewrite, the record
        after = layout(spark, f"inc.{name}")
        assert_exact(uri, expected)
        assert after.unclustered_row_share == 0.0
        assert after.clustering_depth < before.clustering_depth, (round_, before.clustering_depth, after.clustering_depth)
        depths.append(after.clustering_depth)
        # size-tiered: after the first run (no record yet: everything), the appends form a layer
        # of their own, merged with the earlier layers no bigger than they are; the big first
        # layer is not rewritten for a few more rows
        assert round_ == 0 or r.fragments_removed < fragments, (round_, r.fragments_removed, fragments)
        h = health(spark, name)
        assert h.clustering_depth == after.clustering_depth and h.unclustered_row_share == 0.0
    # bounded by the layers: about log2(appended / first) + 1 (here [2, 2, 3, 2]-like)
    assert max(depths) <= 3.1 and min(depths) <= 2.1, depths


def test_a_run_rewrites_only_what_overlaps(spark, warehouse):
    """Appends of a few tenants overlap a few clustered fragments: the run rewrites those and
    the new ones, not the whole table."""
    uri = str(warehouse / "inc" / "narrow.lance")
    expected = []
    for i in range(6):
        t = rows(i * 500, 500, 50 + i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql("ALTER TABLE lance.inc.narrow CLUSTER BY (tenant)")
    r = spark.sql("CALL lance.compact(table => 'inc.narrow', target_rows_per_fragment => 400)").collect()[0]
    clustered = len(lance.dataset(uri).get_fragments())
    assert r.fragments_removed == 6 and clustered >= 7
    state = ClusteringState.from_config(lance.dataset(uri).config())
    assert state is not None and set(state.ranges) == {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    shown = {r.key: r.value for r in spark.sql("SHOW TBLPROPERTIES lance.inc.narrow").collect()}[STATE_KEY]
    assert shown == f"{clustered} fragments clustered by tenant ASC NULLS FIRST (the clustering's record; UNSET forgets it)"

    expected.append(append(uri, 50_000, 7, n=100, tenants=2))  # tenants 0 and 1 only
    plan = spark.sql("CALL lance.plan_compaction(table => 'inc.narrow', target_rows_per_fragment => 400)").collect()
    assert len(plan) == 1 and "incremental" in plan[0].reason
    r = spark.sql("CALL lance.compact(table => 'inc.narrow', target_rows_per_fragment => 400)").collect()[0]
    # size-tiered: 100 new rows are a layer of their own (the clustered fragment holding
    # tenants 0-1 has more rows than they do), so only the new fragment is rewritten
    assert r.fragments_removed == plan[0].fragments == 1, r
    assert_exact(uri, expected)
    assert layout(spark, "inc.narrow").clustering_depth <= 1.6
    # more rows of tenants 0-1 than the layers there hold: merged with the small layer and the
    # clustered fragment(s) they overlap, and no others
    expected.append(append(uri, 60_000, 8, n=600, tenants=2))
    r = spark.sql("CALL lance.compact(table => 'inc.narrow', target_rows_per_fragment => 400)").collect()[0]
    assert 3 <= r.fragments_removed <= 4, r
    assert_exact(uri, expected)
    assert layout(spark, "inc.narrow").clustering_depth <= 1.3

    # Nothing unclustered, nothing overlapping: a run does nothing.
    r = spark.sql("CALL lance.compact(table => 'inc.narrow', target_rows_per_fragment => 400)").collect()[0]
    assert r.commits == 0 and r.fragments_removed == 0 and r.new_version == r.read_version
    # full => true re-clusters everything.
    n = len(lance.dataset(uri).get_fragments())
    r = spark.sql("CALL lance.compact(table => 'inc.narrow', target_rows_per_fragment => 400, full => true)").collect()[0]
    assert r.fragments_removed == n
    assert_exact(uri, expected)


def test_budgets_leave_the_rest_for_later_runs(spark, warehouse):
    uri = str(warehouse / "inc" / "budget.lance")
    expected = []
    for i in range(8):
        t = rows(i * 200, 200, 70 + i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql("ALTER TABLE lance.inc.budget CLUSTER BY (ts)")
    shares, left = [], []
    for _ in range(4):
        r = spark.sql("CALL lance.compact(table => 'inc.budget', target_rows_per_fragment => 400, "
                      "options => map('max_source_fragments', '3'))").collect()[0]
        assert r.fragments_removed <= 3
        left.append(r.fragments_left)
        shares.append(layout(spark, "inc.budget").unclustered_row_share)
        assert_exact(uri, expected)
    assert shares[0] < 1.0 and left[0] > 0
    assert shares == sorted(shares, reverse=True) and shares[-1] == 0.0, shares


def test_the_record_survives_plain_compaction_and_cleanup(spark, warehouse):
    uri = str(warehouse / "inc" / "survive.lance")
    expected = []
    for i in range(4):
        t = rows(i * 300, 300, 90 + i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql("ALTER TABLE lance.inc.survive CLUSTER BY (tenant)")
    spark.sql("CALL lance.compact(table => 'inc.survive', target_rows_per_fragment => 300)").collect()
    assert layout(spark, "inc.survive").unclustered_row_share == 0.0
    spark.sql("CALL lance.cleanup(table => 'inc.survive', older_than => '0 seconds')").collect()
    assert layout(spark, "inc.survive").unclustered_row_share == 0.0  # the record is in the newest manifest
    expected.append(append(uri, 9_000, 99, n=50))
    # A plain compaction merges fragments into new ones the record does not know: unclustered, not wrong.
    spark.sql("CALL lance.compact(table => 'inc.survive', sort_order => 'none')").collect()
    after = layout(spark, "inc.survive")
    assert after.unclustered_row_share == 1.0 and after.fragments == 1
    assert json.loads(lance.dataset(uri).config()[STATE_KEY])["order"] == "tenant ASC NULLS FIRST"
    spark.sql("CALL lance.compact(table => 'inc.survive', target_rows_per_fragment => 300)").collect()
    assert layout(spark, "inc.survive").unclustered_row_share == 0.0
    assert_exact(uri, expected)
    # UNSET forgets the record: every fragment counts as unclustered again, nothing else changes.
    spark.sql(f"ALTER TABLE lance.inc.survive UNSET TBLPROPERTIES ('{STATE_KEY}')")
    assert STATE_KEY not in lance.dataset(uri).config() and layout(spark, "inc.survive").unclustered_row_share == 1.0
    assert_exact(uri, expected)


def test_where_limits_the_candidates(spark, warehouse):
    uri = str(warehouse / "inc" / "where.lance")
    expected = []
    for i in range(6):
        t = rows(i * 500, 500, 120 + i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql("ALTER TABLE lance.inc.where CLUSTER BY (tenant, ts)")
    q = "CALL lance.{}(table => 'inc.where', target_rows_per_fragment => 400, where => 'id < 1000')"
    plan = spark.sql(q.format("plan_compaction")).collect()
    assert len(plan) == 1 and plan[0].fragment_ids == [0, 1]
    r = spark.sql(q.format("compact")).collect()[0]
    assert r.fragments_removed == 2 and r.strategy == "clustering"
    assert_exact(uri, expected)
    share = layout(spark, "inc.where").unclustered_row_share
    assert share == pytest.approx(4 / 6, abs=0.01)
    # Nothing matches: nothing to do, nothing written.
    version = lance.dataset(uri).version
    r = spark.sql("CALL lance.compact(table => 'inc.where', where => 'id < 0')").collect()[0]
    assert r.commits == 0 and lance.dataset(uri).version == version


def test_maintenance_clusters_appends_of_full_size_fragments(spark, warehouse):
    """A table kept clustered whose appends are full-size fragments (never small, so never due
    by size): compaction is due once 10% of its rows are not yet clustered, in table_health and
    in maintain alike; maintain's run clusters them (every row once, exact), and it is not due
    again until more rows arrive."""
    name, uri = "big_appends", str(warehouse / "inc" / "big_appends.lance")
    expected = []
    for i in range(4):
        t = rows(i * 300, 300, 50 + i)
        lance.write_dataset(t, uri, mode="append" if i else "create")
        expected.append(t)
    spark.sql(f"ALTER TABLE lance.inc.{name} CLUSTER BY (tenant, ts)")
    maintain = (f"CALL lance.maintain(table => 'inc.{name}', target_rows_per_fragment => 300, "
                "older_than => '7 days')")

    def compact_row():
        return next(r for r in spark.sql(maintain).collect() if r.step == "compact")

    def due() -> list:
        return spark.sql(f"SELECT due FROM lance.system.table_health WHERE namespace = 'inc' "
                         f"AND `table` = '{name}'").collect()[0].due

    assert "compact" in due()
    r = compact_row()
    assert r.ran and r.reason.startswith("due:") and "100% of rows not yet clustered" in r.reason, r
    assert layout(spark, f"inc.{name}").unclustered_row_share == 0.0
    assert_exact(uri, expected)
    r = compact_row()
    assert not r.ran and "under 10% of rows not yet clustered" in r.reason, r
    assert "compact" not in due()

    expected.append(append(uri, 5_000, 99))  # one full-size fragment: 20% of the rows
    assert "compact" in due()
    r = compact_row()
    assert r.ran and "20% of rows not yet clustered" in r.reason, r
    assert layout(spark, f"inc.{name}").unclustered_row_share == 0.0
    assert_exact(uri, expected)
