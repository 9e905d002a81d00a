"""Clustered compaction (``sort_order``): CALL and PySpark, linear order and z-order, the dry
run, bad input refused before anything is read, content exact (every column, the vector
too), deletions dropped, index coverage restored with equal answers, a concurrent delete
never lost or resurrected, stable row ids refused, and a table on S3. One Spark session."""
from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import lance_session, refused
from lance_compact import compact, plan_compaction
from lance_compact.api import CATALOG_CLASS
from lance_compact.compaction.clustering.plan import FILL

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spark(warehouse, s3):
    """One session, two catalogs: ``lance`` over a local warehouse, ``lance_s3`` over a bucket
    of the moto server (test credentials only)."""
    wh = s3.fresh_bucket("cluster") + "/wh"
    conf = {"spark.sql.shuffle.partitions": "2", f"spark.sql.catalog.lance_s3": CATALOG_CLASS,
            "spark.sql.catalog.lance_s3.warehouse": wh}
    for k, v in s3.storage_options.items():
        conf[f"spark.sql.catalog.lance_s3.storage.{k}"] = v
    session = lance_session("local[2]", "lance-compact-clustering", str(warehouse), conf)
    session.s3_warehouse = wh
    yield session
    session.stop()


def rows(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 40, n)
    nulls = rng.random(n) < 0.05
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "tenant": pa.array(tenant, mask=nulls),
        "ts": pa.array(rng.integers(0, 1_000_000, n)),
        "name": pa.array([f"n{v % 97}" for v in rng.integers(0, 10_000, n)]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 4, dtype=np.float32)), 4),
    })


def make_table(root, name: str, fragments: int = 8, per: int = 500, storage_options=None,
               indices: bool = True, **write) -> str:
    """``fragments`` appends of random rows, a delete in every other fragment, BTREE on
    tenant and ZONEMAP on ts; returns the dataset URI."""
    uri = f"{root}/db/{name}.lance"
    if "://" not in uri:
        shutil.rmtree(uri, ignore_errors=True)
    for i in range(fragments):
        lance.write_dataset(rows(i * per, per, i), uri, mode="append" if i else "create",
                            storage_options=storage_options, **write)
    ds = lance.dataset(uri, storage_options=storage_options)
    ds.delete("(id / 500) % 2 = 1 AND id % 7 = 0")
    if indices:
        ds.create_scalar_index("tenant", "BTREE")
        ds.create_scalar_index("ts", "ZONEMAP")
    return uri


def content(ds) -> pa.Table:
    return ds.to_table().sort_by("id")


def answers(ds) -> dict:
    """Filtered reads with and without the scalar indices."""
    out = {}
    for f in ["tenant = 7", "tenant IS NULL", "tenant >= 30", "ts < 50000", "ts >= 500000 AND tenant < 3"]:
        got = ds.to_table(filter=f, columns=["id"]).sort_by("id")
        scan = ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")
        assert got == scan, f
        out[f] = got["id"].to_pylist()
    return out


def unindexed(ds) -> dict:
    from lance_compact.maintenance.indices import index_state
    return {n: e["unindexed"] for n, e in index_state(ds).items()}


def call(spark, table: str, args: str, catalog: str = "lance"):
    return spark.sql(f"CALL {catalog}.compact(table => '{table}', {args})").collect()[0]


def fragments_holding(ds, column: str, predicate) -> int:
    """How many fragments hold a row whose ``column`` satisfies ``predicate``."""
    return sum(1 for f in ds.get_fragments()
               if predicate(f.to_table(columns=[column])[column]))


def test_linear_sort_through_call(spark, warehouse):
    uri = make_table(warehouse, "linear")
    before = lance.dataset(uri)
    expected, expected_answers = content(before), answers(before)
    deleted = sum(f.metadata.num_deletions for f in before.get_fragments())
    dry = spark.sql("CALL lance.plan_compaction(table => 'db.linear', target_rows_per_fragment => 1000, "
                    "sort_order => 'tenant ASC NULLS LAST, ts DESC')").collect()
    assert len(dry) == 1 and dry[0].fragments == 8 and dry[0].rows == before.count_rows()
    assert dry[0].deleted_rows == deleted and dry[0].bytes > 0
    assert dry[0].expected_output_fragments == math.ceil(before.count_rows() / (1000 * FILL))
    assert "cluster by tenant ASC NULLS LAST, ts DESC NULLS LAST" in dry[0].reason
    assert lance.dataset(uri).version == before.version  # the dry run wrote nothing

    r = call(spark, "db.linear", "target_rows_per_fragment => 1000, sort_order => 'tenant ASC NULLS LAST, ts DESC'")
    after = lance.dataset(uri)
    assert r.strategy == "clustering" and r.sort_order == "tenant ASC NULLS LAST, ts DESC NULLS LAST"
    assert r.read_version == before.version and r.new_version == after.version
    assert r.fragments_removed == 8 and r.fragments_added == len(after.get_fragments()) == dry[0].expected_output_fragments
    assert all(f.count_rows() <= 1000 for f in after.get_fragments())
    assert r.rows_rewritten == before.count_rows() and r.deleted_rows_removed == deleted > 0
    assert r.commits == 3 and r.retries == 0 and r.conflicts is None  # the Rewrite, the record, optimize_indices
    assert "tenant_idx" in r.index_coverage and "ts_idx" in r.index_coverage and "restored" in r.index_coverage
    assert content(after) == expected  # every row once, every column exact, the vector too
    assert all(f.metadata.num_deletions == 0 for f in after.get_fragments())
    # The table, read in fragment order, is in the sort order.
    t = after.to_table(columns=["tenant", "ts"])
    order = pc.sort_indices(t, sort_keys=[("tenant", "ascending", "at_end"), ("ts", "descending", "at_end")])
    assert order.to_pylist() == list(range(t.num_rows))
    assert unindexed(after) == {"tenant_idx": 0, "ts_idx": 0}
    assert answers(after) == expected_answers
    assert fragments_holding(after, "tenant", lambda c: pc.any(pc.equal(c, 7)).as_py()) <= 2


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
def test_curves_through_pyspark(spark, warehouse, curve):
    uri = make_table(warehouse, curve, indices=False)
    before = lance.dataset(uri)
    expected = content(before)
    order = f"{curve}(tenant, ts)"
    plan = plan_compaction(spark, f"db.{curve}", sort_order=order, target_rows_per_fragment=250).collect()
    assert len(plan) == 1 and plan[0].expected_output_fragments == math.ceil(before.count_rows() / (250 * FILL))
    r = compact(spark, f"db.{curve}", sort_order=order.upper().replace("TENANT, TS", "tenant, ts"),
                target_rows_per_fragment=250).collect()[0]
    after = lance.dataset(uri)
    assert r.sort_order == order and r.index_coverage is None and r.commits == 2  # the Rewrite and the record (state.py)
    assert content(after) == expected
    n = len(after.get_fragments())
    assert n >= 15
    # Both columns cluster: a narrow range of either touches fewer fragments than before (every one).
    narrow_tenant = fragments_holding(after, "tenant", lambda c: pc.any(pc.equal(c, 7)).as_py())
    narrow_ts = fragments_holding(after, "ts", lambda c: pc.any(pc.less(c, 30_000)).as_py())
    assert fragments_holding(before, "tenant", lambda c: pc.any(pc.equal(c, 7)).as_py()) == 8
    assert narrow_tenant <= n // 2 and narrow_ts <= n // 2, (narrow_tenant, narrow_ts, n)


@pytest.fixture(scope="module")
def odd_table(warehouse):
    """A table with columns of every kind a sort order must refuse."""
    uri = str(warehouse / "db" / "odd.lance")
    t = rows(0, 200, 1).append_column("tags", pa.array([["a", "b"]] * 200)) \
        .append_column("point", pa.array([{"x": 1, "y": 2}] * 200))
    lance.write_dataset(t, uri)
    lance.write_dataset(rows(200, 200, 2).append_column("tags", pa.array([["c"]] * 200))
                        .append_column("point", pa.array([{"x": 3, "y": 4}] * 200)), uri, mode="append")
    return uri


@pytest.mark.parametrize("columns, bits", [(2, 4), (3, 3), (4, 2)])
def test_the_hilbert_curve_visits_every_cell_once_moving_to_a_neighbour(columns, bits):
    """Positions on the curve are a bijection onto the grid, and consecutive positions are
    neighbouring cells (one step along one axis): why it clusters better than a z-order,
    whose jumps span the grid."""
    import itertools

    from lance_compact.compaction.clustering.keys import hilbert_transpose

    cells = np.array(list(itertools.product(range(1 << bits), repeat=columns)), dtype=np.uint64)
    t = hilbert_transpose([cells[:, i] for i in range(columns)], bits)
    pos = np.zeros(len(cells), dtype=np.uint64)
    for j, a in enumerate(t):
        for bit in range(bits):
            pos |= ((a >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * columns + (columns - 1 - j))
    assert sorted(pos.tolist()) == list(range(len(cells)))
    path = cells[np.argsort(pos)].astype(np.int64)
    assert (np.abs(np.diff(path, axis=0)).sum(axis=1) == 1).all()


@pytest.mark.parametrize("order, match", [
    ("nope", "sort_order column 'nope' does not exist"),
    ("  ", "it is empty"),
    ("Tenant", "did you mean 'tenant'"),
    ("vector", "'vector' is a vector"),
    ("tags DESC", "'tags' is a nested column"),
    ("point", "'point' is a nested column"),
    ("zorder(tenant)", "zorder needs at least two columns"),
    ("tenant ASC DESC", "is not 'column \\[ASC\\|DESC\\]"),
    ("tenant,", "is not 'column"),
    ("tenant, tenant", "appears twice"),
    ("zorder(tenant, vector)", "'vector' is a vector"),
    ("ts, zorder(tenant, name)", "must be the whole sort order"),
    ("hilbert(tenant)", "hilbert needs at least two columns"),
    ("hilbert(tenant, ts DESC)", "hilbert takes plain column names"),
    ("hilbert(tenant, ts), name", "must be the whole sort order"),
])
def test_bad_sort_orders_are_refused_before_anything_is_read(spark, odd_table, order, match):
    with refused(odd_table, match):
        call(spark, "db.odd", f"sort_order => '{order}'")


@pytest.mark.parametrize("args, match", [
    ("strategy => 'io_bounded'", "cannot be combined with strategy 'io_bounded'"),
    ("compaction_mode => 'try_binary_copy'", "option compaction_mode does not apply with sort_order"),
    ("min_input_fragments => 3", "min_input_fragments is not supported with sort_order"),
])
def test_options_a_clustering_cannot_honour_are_refused(spark, odd_table, args, match):
    with refused(odd_table, match):
        call(spark, "db.odd", f"sort_order => 'tenant', {args}")


def test_stable_row_ids_are_refused(spark, warehouse):
    uri = make_table(warehouse, "stable", fragments=2, indices=False, enable_stable_row_ids=True)
    assert lance.dataset(uri).has_stable_row_ids
    with refused(uri, "stable row ids"):
        call(spark, "db.stable", "sort_order => 'tenant'")


def test_a_concurrent_delete_is_never_lost_or_resurrected(spark, warehouse):
    """The delete lands between the rewrite and its commit: Lance refuses the Rewrite (it
    read the deleted rows), the group runs again at the new version."""
    uri = make_table(warehouse, "concurrent")
    before = lance.dataset(uri)
    first = min(f.fragment_id for f in before.get_fragments())
    gone = before.get_fragment(first).to_table(columns=["id"])["id"].to_pylist()[:5]
    r = call(spark, "db.concurrent", "target_rows_per_fragment => 1000, sort_order => 'ts', "
             "options => map('test_before_commit', 'writers.delete_in_first_fragment')")
    after = lance.dataset(uri)
    assert r.retries == 1 and "preempted by concurrent transaction Delete" in r.conflicts
    assert r.tasks_conflicted == 0 and r.commits == 3
    expected = content(before).filter(pc.invert(pc.is_in(content(before)["id"], pa.array(gone))))
    assert content(after) == expected
    assert answers(after) == answers(lance.dataset(uri, version=before.version + 1))  # the delete's version


def test_conflicts_past_max_retries_are_reported_and_nothing_is_committed(spark, warehouse):
    uri = make_table(warehouse, "always", fragments=4)
    r = call(spark, "db.always", "sort_order => 'ts', max_retries => 1, "
             "options => map('test_before_commit', 'writers.delete_everywhere')")
    after = lance.dataset(uri)
    assert r.tasks_conflicted == 1 and r.retries == 1 and r.commits == 0 and "gave up" in r.conflicts
    ops = [t.operation.__class__.__name__ for t in after.get_transactions(4)]
    assert "Rewrite" not in ops and ops.count("Delete") == 2
    assert not [p for p in (Path(uri) / "data").iterdir()
                if p.name not in {d.path for f in after.get_fragments() for d in f.metadata.data_files()}]


def test_restore_indices_false_leaves_coverage_to_optimize_indices(spark, warehouse):
    uri = make_table(warehouse, "noindex", fragments=4)
    before = lance.dataset(uri)
    expected = answers(before)
    r = call(spark, "db.noindex", "sort_order => 'tenant DESC', options => map('restore_indices', 'false')")
    after = lance.dataset(uri)
    assert r.commits == 2 and "restore_indices=false" in r.index_coverage
    assert unindexed(after) == {"tenant_idx": 1, "ts_idx": 1}
    assert answers(after) == expected  # still right: the uncovered fragment is scanned


def test_table_on_s3(spark, s3):
    uri = make_table(spark.s3_warehouse, "remote", fragments=4, storage_options=s3.storage_options)
    before = lance.dataset(uri, storage_options=s3.storage_options)
    expected = content(before)
    r = call(spark, "db.remote", "target_rows_per_fragment => 700, sort_order => 'zorder(tenant, name)'",
             catalog="lance_s3")
    after = lance.dataset(uri, storage_options=s3.storage_options)
    assert r.new_version == after.version and r.fragments_removed == 4 and r.fragments_added >= 3
    assert content(after) == expected
    assert unindexed(after) == {"tenant_idx": 0, "ts_idx": 0}


def test_table_clustering_and_incremental_run_on_s3(spark, s3):
    """CLUSTER BY, the record and an incremental run on the S3-compatible server."""
    so = s3.storage_options
    uri = make_table(spark.s3_warehouse, "remote_inc", fragments=4, storage_options=so, indices=False)
    spark.sql("ALTER TABLE lance_s3.db.remote_inc CLUSTER BY (tenant)")
    assert lance.dataset(uri, storage_options=so).config()["lance_compact.cluster_by"] == "tenant ASC NULLS FIRST"
    spark.sql("CALL lance_s3.compact(table => 'db.remote_inc', target_rows_per_fragment => 400)").collect()
    lance.write_dataset(rows(90_000, 100, 77).set_column(1, "tenant", pa.array([3] * 100)), uri, mode="append",
                        storage_options=so)
    expected = content(lance.dataset(uri, storage_options=so))
    before = spark.sql("CALL lance_s3.describe_layout(table => 'db.remote_inc')").collect()[0]
    r = spark.sql("CALL lance_s3.compact(table => 'db.remote_inc', target_rows_per_fragment => 400)").collect()[0]
    after = spark.sql("CALL lance_s3.describe_layout(table => 'db.remote_inc')").collect()[0]
    assert r.fragments_removed < before.fragments  # the new fragment and the one or two holding tenant 3
    assert before.unclustered_row_share > 0 and after.unclustered_row_share == 0.0
    assert after.clustering_depth < before.clustering_depth
    assert content(lance.dataset(uri, storage_options=so)) == expected


def test_benchmark_smoke(spark, tmp_path):
    """benchmarks/clustering.py runs end to end on a tiny table and prints its table."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "clustering.py"), "--rows", "20000",
                          "--fragments", "10", "--dir", str(tmp_path), "--skip-spark"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tenant = 7" in out.stdout and "iops" in out.stdout


@pytest.mark.parametrize("kind", [pa.null(), pa.dictionary(pa.int32(), pa.string()), pa.map_(pa.string(), pa.int64()),
                                  pa.large_list(pa.int64())])
def test_types_that_cannot_be_ordered_are_named(kind):
    """The schema check alone (Lance stores few of these types; the check is the same)."""
    from lance_compact.compaction.clustering.sort_order import check_columns, parse_sort_order
    from lance_compact.errors import CompactionError

    schema = pa.schema([pa.field("a", pa.int64()), pa.field("odd", kind)])
    with pytest.raises(CompactionError, match=r"sort_order column 'odd' (has type|is a nested column)"):
        check_columns(parse_sort_order("zorder(a, odd)", "db.t"), schema, "db.t")
    check_columns(parse_sort_order("a DESC NULLS FIRST", "db.t"), schema, "db.t")


def test_each_key_keeps_its_own_null_placement_on_every_pyarrow():
    """Sort keys as (name, order, null_placement) triples are taken by pyarrow from 25.0 only
    ("too many values to unpack" on 22, a platform's Arrow); keys.sort_indices keeps each key's
    own direction and null placement with pairs, as every pyarrow from 16 on sorts them
    (checked by hand on pyarrow 22.0.0 and 26.0.1: the same orders)."""
    import pyarrow as pa

    from lance_compact.compaction.clustering.keys import order_indices
    from lance_compact.compaction.clustering.sort_order import SortKey

    t = pa.table({"a": [3, None, 1, 2, None], "b": ["x", "y", None, "z", "w"]})
    cases = [((SortKey("a", False, True),), [None, None, 1, 2, 3]),
             ((SortKey("a", False, False),), [1, 2, 3, None, None]),
             ((SortKey("a", True, True),), [None, None, 3, 2, 1]),
             ((SortKey("a", True, False), SortKey("b", False, True)), [3, 2, 1, None, None])]
    for keys, want in cases:
        assert t.take(order_indices(t, keys))["a"].to_pylist() == want, keys
    mixed = t.take(order_indices(t, (SortKey("a", True, False), SortKey("b", True, True))))
    assert mixed["b"].to_pylist()[-2:] == ["y", "w"]  # the a-null rows, b descending
