"""Every read path on tables as maintenance and other writers leave them (tests/aged_tables.py):
history cleaned after an index-remapping compaction, undecodable transactions, deferred index
remaps, stable row ids, v2 manifest paths, lance-spark's layout, one version, deletion files
everywhere, no rows, IVF_PQ. Each procedure, system table, metadata table, SELECT, SHOW
TBLPROPERTIES and the PySpark API answers with the figures pylance sees (null where cleanup made
a figure unknowable, never an error row); compaction, index optimization, cleanup and maintenance
on them keep every row and every index answer; and after compact + cleanup every read works
again. Read-only paths use namespace ``aged`` (built once); writing paths build a fresh table."""
import shutil

import lance
import pytest

from aged_tables import AGED, build
from conftest import NO_VERSION_FLOOR, refused
from index_checks import index_agrees_with_scan
from oracle import content
from lance_compact import api

SPARK_CONF = NO_VERSION_FLOOR  # the operator's: cleanup of versions seconds old

NAMES = list(AGED)


@pytest.fixture(scope="module")
def aged(warehouse):
    """Namespace ``aged``: every aged table, built once; name -> (path, oracle, facts)."""
    out = {}
    for name in NAMES:
        path = warehouse / "aged" / f"{name}.lance"
        shutil.rmtree(path, ignore_errors=True)
        out[name] = (path, *build(str(path), name))
    return out


def fresh(warehouse, namespace: str, name: str):
    """A freshly built aged table ``name`` in ``namespace``: (identifier, path, oracle, facts)."""
    path = warehouse / namespace / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    oracle, facts = build(str(path), name)
    return f"{namespace}.{name}", path, oracle, facts


def user_indices(ds) -> dict[str, set[int]]:
    """Per user index, the fragments it covers (pylance's view)."""
    out: dict[str, set[int]] = {}
    for ix in ds.list_indices():
        if not ix["name"].startswith("__"):
            out.setdefault(ix["name"], set()).update(ix["fragment_ids"] or [])
    return out


def rows_and_indices_kept(path, oracle):
    """Every row exactly as the oracle; every index answer equal to a scan."""
    ds = lance.dataset(str(path))
    assert content(ds) == oracle
    if ds.count_rows():
        index_agrees_with_scan(ds)


def expected_last(facts):
    """(last_compacted_version, last_compaction text) pylance's facts give."""
    if "compacted" not in facts:
        return None, None
    v, removed, added = facts["compacted"]
    return v, (None if facts.get("counts_lost") else f"{removed} fragments -> {added}")


def check_layout(row, path, oracle, facts):
    ds = lance.dataset(str(path))
    frags = ds.get_fragments()
    assert (row.version, row.fragments, row.rows) == (ds.version, len(frags), oracle.num_rows)
    assert row.fragment_rows == [f.count_rows() for f in frags]
    assert sorted(n for n, *_ in row.indices) == sorted(user_indices(ds))
    version, how = expected_last(facts)
    assert (row.last_compacted_version, row.last_compaction) == (version, how)
    assert (row.last_compacted_at is None) == (version is None)
    assert 0 <= row.health_score <= 100


# ---- read paths, on the tables as they are --------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_describe_layout_and_histogram(spark, aged, name):
    path, oracle, facts = aged[name]
    rows = spark.sql(f"CALL lance.describe_layout(table => 'aged.{name}')").collect()
    assert len(rows) == 1
    check_layout(rows[0], path, oracle, facts)
    check_layout(api.describe_layout(spark, f"aged.{name}").collect()[0], path, oracle, facts)
    hist = [r.histogram for r in spark.sql(
        f"CALL lance.describe_layout(table => 'aged.{name}', histogram => true)").collect()]
    assert hist and any(str(lance.dataset(str(path)).version) in line for line in hist)


@pytest.mark.parametrize("name", NAMES)
def test_dry_runs_write_nothing_and_see_the_table(spark, aged, name):
    path, oracle, facts = aged[name]
    ds = lance.dataset(str(path))
    live = {f.fragment_id for f in ds.get_fragments()}
    if oracle.num_rows == 0:  # by design a clear error naming the table (see orchestrate.py)
        with refused(path, f"table aged.{name}: the table is empty"):
            spark.sql(f"CALL lance.plan_compaction(table => 'aged.{name}')").collect()
    else:
        plan = spark.sql(f"CALL lance.plan_compaction(table => 'aged.{name}', "
                         "target_rows_per_fragment => 300)").collect()
        for task in plan:
            assert task.read_version == ds.version and set(task.fragment_ids) <= live
        assert [tuple(r) for r in api.plan_compaction(spark, f"aged.{name}", target_rows_per_fragment=300)
                .collect()] == [tuple(r) for r in plan]
    c = spark.sql(f"CALL lance.cleanup(table => 'aged.{name}', older_than => '0 seconds', "
                  "dry_run => true)").collect()[0]
    assert c.dry_run and c.version == ds.version and c.old_versions == len(ds.versions()) - 1
    oi = spark.sql(f"CALL lance.optimize_indices(table => 'aged.{name}', dry_run => true)").collect()[0]
    covered = user_indices(ds)
    assert oi.unindexed_fragments_before == sum(len(live - c) for c in covered.values())
    steps = spark.sql(f"CALL lance.maintain(table => 'aged.{name}', target_rows_per_fragment => 300, "
                      "older_than => '0 seconds', dry_run => true)").collect()
    assert steps and all(not s.ran for s in steps)
    assert lance.dataset(str(path)).version == ds.version


@pytest.mark.parametrize("name", NAMES)
def test_select_and_properties(spark, aged, name):
    path, oracle, _ = aged[name]
    t = f"lance.aged.{name}"
    assert spark.sql(f"SELECT count(*) FROM {t}").collect()[0][0] == oracle.num_rows
    got = sorted((r.id, r.category, r.payload, list(r.vector)) for r in spark.table(t).collect())
    want = sorted((r["id"], r["category"], r["payload"], r["vector"]) for r in oracle.to_pylist())
    assert got == [(i, c, p, pytest.approx(v)) for i, c, p, v in want]
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {t}").collect()}
    for k, v in (lance.dataset(str(path)).config() or {}).items():
        assert props.get(k) == v


@pytest.mark.parametrize("name", NAMES)
def test_metadata_tables(spark, aged, name):
    path, oracle, facts = aged[name]
    ds = lance.dataset(str(path))
    t = f"lance.aged.{name}"
    frags = spark.sql(f"SELECT * FROM {t}.fragments ORDER BY id").collect()
    assert [(f.id, f.live_rows) for f in frags] == [(f.fragment_id, f.count_rows()) for f in ds.get_fragments()]
    assert sum(f.live_rows for f in frags) == oracle.num_rows
    # the same from the aggregates the engine answers in one row (pushed to the scan)
    pushed = f"SELECT count(*), sum(live_rows), sum(deleted_rows), min(id), max(id) FROM {t}.fragments"
    assert "agg0" in spark.sql(f"EXPLAIN {pushed}").collect()[0][0]
    ids = [f.id for f in frags]
    assert list(spark.sql(pushed).collect()[0]) == [
        len(frags), oracle.num_rows if frags else None, sum(f.deleted_rows for f in frags) if frags else None,
        min(ids, default=None), max(ids, default=None)]
    versions = spark.sql(f"SELECT * FROM {t}.versions ORDER BY version").collect()
    assert [v.version for v in versions] == sorted(v["version"] for v in ds.versions())
    check_rewrites(versions, facts)
    indices = spark.sql(f"SELECT * FROM {t}.indices ORDER BY name").collect()
    live = {f.fragment_id for f in ds.get_fragments()}
    assert {i.name: (i.fragments_covered, sorted(i.unindexed_fragments)) for i in indices} == \
        {n: (len(c & live), sorted(live - c)) for n, c in user_indices(ds).items()}


def check_rewrites(versions, facts):
    """The compaction's row: its counts, or nulls when they cannot be known."""
    if "compacted" not in facts:
        return
    v, removed, added = facts["compacted"]
    row = next(r for r in versions if r.version == v)
    assert row.operation == "Rewrite"
    want = (None, None) if facts.get("counts_lost") else (removed, added)
    assert (row.fragments_removed, row.fragments_added) == want


def test_system_tables_have_a_right_row_per_aged_table(spark, aged):
    health = {r.table: r for r in spark.sql(
        "SELECT * FROM lance.system.table_health WHERE namespace = 'aged'").collect()}
    assert set(health) == set(NAMES)
    history = spark.sql("SELECT * FROM lance.system.maintenance_history WHERE namespace = 'aged'").collect()
    for name, (path, oracle, facts) in aged.items():
        ds = lance.dataset(str(path))
        h = health[name]
        assert h.error is None, (name, h.error)
        assert (h.version, h.rows, h.versions) == (ds.version, oracle.num_rows, len(ds.versions()))
        assert h.last_compacted_version == expected_last(facts)[0]
        mine = sorted((r for r in history if r.table == name), key=lambda r: r.version)
        assert all(r.error is None for r in mine), name
        assert [r.version for r in mine] == sorted(v["version"] for v in ds.versions())
        check_rewrites(mine, facts)
        assert all(r.details for r in mine if r.operation == "Rewrite")


def test_maintain_warehouse_dry_run_evaluates_every_aged_table(spark, aged):
    before = {n: lance.dataset(str(p)).version for n, (p, _, _) in aged.items()}
    rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'aged', target_rows_per_fragment => 300, "
                     "older_than => '7 days', dry_run => true)").collect()
    assert {r.table for r in rows} == {f"aged.{n}" for n in NAMES}
    assert [(r.table, r.error) for r in rows if r.error or (r.reason or "").startswith("failed")] == []
    assert {n: lance.dataset(str(p)).version for n, (p, _, _) in aged.items()} == before


# ---- writing paths, each on a freshly built table -------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_compact_then_cleanup_keeps_rows_and_every_read_works(spark, warehouse, name):
    """The reported case: compact, then a cleanup that removes the version before it."""
    table, path, oracle, _ = fresh(warehouse, "cw", name)
    if oracle.num_rows == 0:
        with refused(path, f"table {table}: the table is empty"):
            spark.sql(f"CALL lance.compact(table => '{table}')").collect()
        read_version = new_version = lance.dataset(str(path)).version
    else:
        r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300)").collect()[0]
        assert r.tasks_failed == 0
        read_version, new_version = r.read_version, r.new_version
    rows_and_indices_kept(path, oracle)
    spark.sql(f"CALL lance.cleanup(table => '{table}', older_than => '0 seconds')").collect()
    ds = lance.dataset(str(path))
    assert [v["version"] for v in ds.versions()] == [ds.version]
    rows_and_indices_kept(path, oracle)
    layout = spark.sql(f"CALL lance.describe_layout(table => '{table}')").collect()[0]
    assert (layout.version, layout.rows) == (ds.version, oracle.num_rows)
    restored = oracle.num_rows and "restored by optimize_indices" in (r.index_coverage or "")
    if new_version != read_version and not restored:
        # it compacted and its Rewrite is the version cleanup kept: the newest compaction is known
        assert layout.last_compacted_version is not None and layout.last_compacted_version <= ds.version, r
    elif new_version != read_version:
        # the compaction ended by restoring indices behind the table (a later version), and cleanup
        # removed the Rewrite's version: no kept version says when the table was compacted
        assert layout.last_compacted_version is None or layout.last_compacted_version <= ds.version
    h = spark.sql(f"SELECT * FROM lance.system.table_health WHERE namespace = 'cw' "
                  f"AND `table` = '{name}'").collect()[0]
    assert h.error is None and (h.version, h.rows) == (ds.version, oracle.num_rows)
    hist = spark.sql(f"SELECT * FROM lance.system.maintenance_history WHERE namespace = 'cw' "
                     f"AND `table` = '{name}'").collect()
    assert [(x.version, x.error) for x in hist] == [(ds.version, None)]
    assert spark.sql(f"SELECT count(*) FROM lance.{table}").collect()[0][0] == oracle.num_rows
    assert spark.sql(f"SELECT count(*) FROM lance.{table}.versions").collect()[0][0] == 1


def test_io_bounded_steps_below_every_task_keep_rows_and_indices(spark, warehouse):
    """io_bounded with a budget of 2 fragments, below every task Lance plans on these tables
    (planner io_bounded.py: the best task's first fragments, planned again by Lance alone): runs
    on every aged table progress, never rewrite more than the budget, and keep every row and
    every index answer."""
    from lance.optimize import Compaction

    due, progressed = [], []
    for name in NAMES:
        table, path, oracle, _ = fresh(warehouse, "iob", name)
        if oracle.num_rows == 0:
            continue
        ds = lance.dataset(str(path))
        before = len(ds.get_fragments())
        if Compaction.plan(ds, {"target_rows_per_fragment": 300}).num_tasks():
            due.append(name)
        for _ in range(3):
            r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300, "
                          "strategy => 'io_bounded', options => map('max_rewrite_fragments', '2'))").collect()[0]
            assert r.tasks_failed == 0 and r.fragments_removed <= 2, (name, r)
            rows_and_indices_kept(path, oracle)
        if len(lance.dataset(str(path)).get_fragments()) < before:
            progressed.append(name)
    # every table Lance would compact progressed, though each of its tasks is over the budget
    assert due and progressed == due, (due, progressed)


@pytest.mark.parametrize("name", NAMES)
def test_pyspark_compact_optimize_indices_and_maintain(spark, warehouse, name):
    table, path, oracle, _ = fresh(warehouse, "pw", name)
    if oracle.num_rows == 0:
        with refused(path, f"table {table}: the table is empty"):
            api.compact(spark, table, target_rows_per_fragment=300).collect()
    else:
        assert api.compact(spark, table, target_rows_per_fragment=300).collect()[0].tasks_failed == 0
    rows_and_indices_kept(path, oracle)
    oi = spark.sql(f"CALL lance.optimize_indices(table => '{table}')").collect()[0]
    assert oi.unindexed_fragments_after == 0
    rows_and_indices_kept(path, oracle)
    steps = spark.sql(f"CALL lance.maintain(table => '{table}', target_rows_per_fragment => 300, "
                      "older_than => '0 seconds')").collect()
    assert {s.step for s in steps} >= {"compact", "optimize_indices", "cleanup"}
    rows_and_indices_kept(path, oracle)
    check_layout_after = api.describe_layout(spark, table).collect()[0]
    assert check_layout_after.rows == oracle.num_rows


def test_maintain_warehouse_maintains_every_aged_table(spark, warehouse):
    built = {name: fresh(warehouse, "mw", name) for name in NAMES}
    args = "namespace => 'mw', target_rows_per_fragment => 300, older_than => '0 seconds'"
    for _ in range(2):  # the second run sees what the first left: compacted and cleaned up
        rows = spark.sql(f"CALL lance.maintain_warehouse({args})").collect()
        assert {r.table for r in rows} == {f"mw.{n}" for n in NAMES}
        assert [(r.table, r.step, r.error) for r in rows
                if r.error or (r.reason or "").startswith("failed")] == []
        for table, path, oracle, _ in built.values():
            rows_and_indices_kept(path, oracle)
    health = spark.sql("SELECT `table`, error FROM lance.system.table_health WHERE namespace = 'mw'").collect()
    assert sorted(health) == sorted((n, None) for n in NAMES)


CLEANED = [n for n in NAMES if n in ("cleaned_after_remap", "undecodable_partly_cleaned", "v2_manifest_paths",
                                     "one_version", "compacted_long_ago")]


@pytest.mark.parametrize("name", CLEANED)
def test_a_cleaned_up_version_is_named_as_such(spark, aged, name):
    """Asking for a version cleanup removed: a clear error naming the version, not a missing
    table; the table stays readable."""
    path, oracle, _ = aged[name]
    assert min(v["version"] for v in lance.dataset(str(path)).versions()) > 1
    with refused(path, r"version 1 does not exist .*cleaned up") as e:
        spark.sql(f"SELECT count(*) FROM lance.aged.{name} VERSION AS OF 1").collect()
    assert "table does not exist" not in str(e.value)
    with refused(path, r"version 1 does not exist .*cleaned up") as e:
        spark.sql(f"CALL lance.describe_layout(table => 'aged.{name}', histogram => true, "
                  "compare_version => 1)").collect()
    assert "table does not exist" not in str(e.value)
    assert spark.sql(f"SELECT count(*) FROM lance.aged.{name}").collect()[0][0] == oracle.num_rows


def test_a_gone_version_is_not_classified_as_a_missing_table(aged):
    """The error pylance raises for a version cleanup removed is named as a version gone."""
    from lance_compact.runtime.failures import MISSING, classify, describe

    path, _, _ = aged["cleaned_after_remap"]
    with pytest.raises(OSError) as e:
        lance.dataset(str(path)).checkout_version(1)
    assert classify(e.value).kind == MISSING
    assert describe(e.value).startswith("a version of the table does not exist")
    with pytest.raises(Exception) as gone:
        lance.dataset(str(path.parent / "no_such_table.lance"))
    assert describe(gone.value).startswith("the table does not exist")


@pytest.mark.parametrize("name", NAMES)
def test_create_index_on_spark_tasks(spark, warehouse, name):
    """CALL lance.create_index on every aged table, its segments built by Spark tasks (a test
    option keeps a small build off the engine): a BITMAP on ``category`` that answers as a scan,
    the table's other indices and rows as they were; an empty table is refused, unchanged."""
    table, path, oracle, _ = fresh(warehouse, "ci", name)
    sql = (f"CALL lance.create_index(table => '{table}', column => 'category', index_type => 'BITMAP', "
           "name => 'aged_bitmap', options => map('rows_per_segment', '1000', 'test_task_sleep_ms', 'all:0'))")
    version = lance.dataset(str(path)).version
    if oracle.num_rows == 0:
        with refused(path, f"table {table}: create_index: the table has no rows to index"):
            spark.sql(sql).collect()
        assert lance.dataset(str(path)).version == version
        return
    r = spark.sql(sql).collect()[0]
    ds = lance.dataset(str(path))
    assert r.built_by == "spark tasks" and r.new_version == ds.version > version, r
    stats = ds.stats.index_stats("aged_bitmap")
    assert stats["num_unindexed_fragments"] == 0, stats
    for f in ("category = 'cat-3'", "category IN ('cat-1', 'cat-16')", "category > 'cat-5'"):
        assert ds.to_table(filter=f, columns=["id"]).sort_by("id") == \
            ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f
    rows_and_indices_kept(path, oracle)
