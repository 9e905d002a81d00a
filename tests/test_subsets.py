"""Compacting a subset: ``where`` (only fragments holding matching rows are candidates, with
every strategy), ``min_input_fragments`` and ``task_order``, as plan_compaction shows them."""
import re
import shutil

import lance
import pytest

from conftest import refused
from oracle import content, degraded_table


@pytest.fixture
def table(warehouse, request):
    name = "sub_" + re.sub(r"\W+", "_", request.node.name)[-40:]
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    # 60 fragments of 40 rows; ids 0..2399; fragment k holds ids 40k..40k+39
    degraded_table(str(path), fragments=60, rows_per_fragment=40)
    return f"db.{name}", path


def fragments_of(ds, ids):
    return {f.fragment_id for f in ds.get_fragments()
            if set(f.to_table(columns=["id"])["id"].to_pylist()) & ids}


@pytest.mark.parametrize("strategy", ["default", "deletion_only", "incremental", "io_bounded"])
def test_where_keeps_other_fragments_untouched(spark, table, strategy):
    t, path = table
    before = lance.dataset(str(path))
    inside = fragments_of(before, set(range(0, 800)))  # the first 20 fragments
    outside = {f.fragment_id: f.metadata.files[0].path for f in before.get_fragments()
               if f.fragment_id not in inside}
    extra = ", options => map('max_rewrite_fragments', '100')" if strategy == "io_bounded" else ""
    since = ", since_version => 1" if strategy == "incremental" else ""
    plan = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300, "
                     f"where => 'id < 800', strategy => '{strategy}'{since}{extra})").collect()
    assert plan and all(set(r.fragment_ids) <= inside for r in plan)
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                  f"where => 'id < 800', strategy => '{strategy}'{since}{extra})").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 1 and content(after) == content(before)
    still = {f.fragment_id: f.metadata.files[0].path for f in after.get_fragments()}
    assert all(still.get(i) == p for i, p in outside.items())  # untouched, same files


def test_a_bad_where_is_named(spark, table):
    t, path = table
    with refused(path, "where 'nope > 1' cannot be resolved against the table's columns: .*`nope` cannot be resolved"):
        spark.sql(f"CALL lance.compact(table => '{t}', where => 'nope > 1')").collect()


def test_min_input_fragments_leaves_small_merges(spark, table):
    t, _ = table
    q = f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300"
    every = spark.sql(q + ")").collect()
    sizes = sorted({len(r.fragment_ids) for r in every})
    assert len(sizes) >= 2, sizes  # lone fragments with deletions, and merges
    n = sizes[-1]
    some = spark.sql(q + f", min_input_fragments => {n})").collect()
    assert [r.task_id for r in some] == [r.task_id for r in every]
    for r in some:
        assert r.selected == (len(r.fragment_ids) >= n)
        if not r.selected:
            assert f"fewer than {n} input fragments" in r.reason
    c = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                  f"min_input_fragments => {n})").collect()[0]
    assert c.tasks == sum(1 for r in some if r.selected) and c.tasks_left == len(some) - c.tasks


KEYS = {"bytes_desc": lambda r: -r.bytes, "bytes_asc": lambda r: r.bytes,
        "fragments_desc": lambda r: -r.fragments}


@pytest.mark.parametrize("order", sorted(KEYS))
def test_task_order(spark, table, order):
    key = KEYS[order]
    t, path = table
    before = lance.dataset(str(path))
    rows = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300, "
                     f"task_order => '{order}')").collect()
    assert [key(r) for r in rows] == sorted(key(r) for r in rows)
    # with partial progress the first group commits first: the first version's new fragments
    # replace the first task's fragments
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, task_order => "
                  f"'{order}', partial_progress => true, max_commits => {len(rows)})").collect()[0]
    assert r.commits == len(rows)
    first = lance.dataset(str(path), version=before.version + 2)
    gone = {f.fragment_id for f in before.get_fragments()} - {f.fragment_id for f in first.get_fragments()}
    assert gone == set(rows[0].fragment_ids)
    assert content(lance.dataset(str(path))) == content(before)


def test_task_order_is_checked(spark, table):
    t, _ = table
    with pytest.raises(Exception, match="task_order must be one of plan, bytes_desc, bytes_asc, fragments_desc"):
        spark.sql(f"CALL lance.compact(table => '{t}', task_order => 'random')").collect()


# ---- where in Spark SQL ------------------------------------------------------------------

@pytest.fixture(scope="module")
def typed(warehouse):
    """12 fragments of 10 rows: fragment k holds ids 10k..10k+9, ts k days and an hour before
    now (UTC instants), d 2026-01-01 + k days, s per fragment (quotes, prefixes), n NULL in
    fragments 4 and 5."""
    import datetime as dt

    import pyarrow as pa

    path = warehouse / "db" / "typed.lance"
    shutil.rmtree(path, ignore_errors=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    words = ["a", "b", "c", "d", "e", "f", "prefix1", "prefix2", "it's", "it's", "z", "z"]
    rows = [(10 * k + i, k) for k in range(12) for i in range(10)]
    lance.write_dataset(pa.table({
        "id": pa.array([r for r, _ in rows], pa.int64()),
        "ts": pa.array([now - dt.timedelta(days=k) for _, k in rows], pa.timestamp("us", "UTC")),
        "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=k) for _, k in rows], pa.date32()),
        "s": pa.array([words[k] for _, k in rows]),
        "n": pa.array([None if k in (4, 5) else k for _, k in rows], pa.int64()),
    }), str(path), max_rows_per_file=10)
    return "db.typed", path


def planned(spark, table, where):
    """The fragments plan_compaction would merge under ``where`` (SQL text, quotes doubled)."""
    rows = spark.sql(f"CALL lance.plan_compaction(table => '{table}', target_rows_per_fragment => 1000, "
                     f"where => '{where}')").collect()
    return set().union(*[set(r.fragment_ids) for r in rows if r.selected])


# Spark SQL -> the fragments holding a matching row (each a run of at least two, so the plan
# merges exactly them); Lance's dialect of the same, where both read it alike (None: Spark only)
WHERES = [
    ("ts > current_timestamp() - INTERVAL 3 DAYS", {0, 1, 2}, None),
    ("ts <= now() - INTERVAL '9' DAY", {9, 10, 11}, None),
    ("d >= DATE '2026-01-10'", {9, 10, 11}, "d >= DATE '2026-01-10'"),
    ("d < date_add(DATE '2026-01-01', 2)", {0, 1}, None),
    ("id IN (5, 15, 25)", {0, 1, 2}, "id IN (5, 15, 25)"),
    ("n IS NULL", {4, 5}, "n IS NULL"),
    ("n IS NOT NULL AND id < 20", {0, 1}, "n IS NOT NULL AND id < 20"),
    ("s LIKE 'prefix%'", {6, 7}, None),
    ("s LIKE '%refix%' OR s LIKE '%1'", {6, 7}, None),
    ("s = 'it''s'", {8, 9}, "s = 'it''s'"),
    ("(id < 20 OR id >= 100) AND NOT (id = 5)", {0, 1, 10, 11}, "(id < 20 OR id >= 100) AND NOT (id = 5)"),
    ("id BETWEEN 30 AND 59", {3, 4, 5}, None),
    ("id + 0 < 2 * 10", None, None),  # arithmetic on a column: refused below
]


@pytest.mark.parametrize("where,fragments,lance_text", [w for w in WHERES if w[1] is not None],
                         ids=[w[0] for w in WHERES if w[1] is not None])
def test_where_is_spark_sql(spark, typed, where, fragments, lance_text):
    """Comparisons, IN, IS NULL, AND/OR/NOT, LIKE 'prefix%', timestamps with
    current_timestamp() - INTERVAL, dates, quoted strings: the fragments with matching rows are
    the candidates, the same ones Lance's own dialect picked for what both read alike."""
    from lance_compact.compaction.fragments import fragments_matching

    t, path = typed
    assert planned(spark, t, where.replace("'", "''")) == fragments
    if lance_text:
        assert fragments_matching(lance.dataset(str(path)), lance_text, t) == fragments


@pytest.mark.parametrize("where,part", [
    ("plus_one(id) > 3", "plus_one"),                      # a UDF
    ("id IN (SELECT 1)", "(a subquery)"),                 # a subquery
    ("rand() < 0.5", "rand("),                             # nondeterministic
    ("id + 0 < 2 * 10", "(id + 0L) < 20L"),                # no exact Lance equivalent
    ("s LIKE '%x%y'", "s LIKE"),
])
def test_a_where_lance_cannot_express_is_refused_naming_the_part(spark, typed, where, part):
    spark.udf.register("plus_one", lambda x: x + 1, "bigint")
    t, path = typed
    with refused(path, "where '.*' has a part Lance's filter cannot express: ") as e:
        spark.sql(f"CALL lance.compact(table => '{t}', where => '{where.replace(chr(39), chr(39) * 2)}')").collect()
    assert part.lower() in str(e.value).lower(), str(e.value)
    assert ".rs:" not in str(e.value)


def test_a_where_on_an_unknown_column_says_so_in_sparks_words(spark, typed):
    t, path = typed
    with refused(path, r"where 'nope > 1' cannot be resolved against the table's columns: .*UNRESOLVED_COLUMN"
                       r".*`nope`") as e:
        spark.sql(f"CALL lance.compact(table => '{t}', where => 'nope > 1')").collect()
    assert e.value.getCondition() == "LANCE_INVALID_ARGUMENT" and e.value.getSqlState() == "22023"
    with refused(path, r"where 'id >' is not a Spark SQL expression"):
        spark.sql(f"CALL lance.compact(table => '{t}', where => 'id >')").collect()


def test_where_in_the_options_map_and_from_python_is_spark_sql_too(spark, typed):
    from lance_compact import plan_compaction

    t, _ = typed
    rows = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 1000, "
                     "options => map('where', 'ts > current_timestamp() - INTERVAL 3 DAYS'))").collect()
    assert set().union(*[set(r.fragment_ids) for r in rows if r.selected]) == {0, 1, 2}
    rows = plan_compaction(spark, t, target_rows_per_fragment=1000, where="s LIKE 'prefix%'").collect()
    assert set().union(*[set(r.fragment_ids) for r in rows if r.selected]) == {6, 7}


def test_the_table_builder_compacts_a_subset_in_order(spark, table):
    """``LanceTable.for_name(...).optimize().where(...).sort_order(...)`` (as Delta's
    DeltaTable.forName(...).optimize().where(...).executeZOrderBy(...)): only the fragments
    holding matching rows are rewritten, the rows come out in the order asked, none lost."""
    from lance_compact import LanceTable

    t, path = table
    before = lance.dataset(str(path))
    inside = fragments_of(before, set(range(0, 800)))
    row = (LanceTable.for_name(spark, t).optimize().where("id < 800").sort_order("id DESC")
           .target_rows_per_fragment(400).execute().collect()[0])
    after = lance.dataset(str(path))
    assert content(after) == content(before) and row.new_version == after.version
    old = {f.fragment_id for f in before.get_fragments()}
    removed = old - {f.fragment_id for f in after.get_fragments()}
    assert row.fragments_removed == len(removed) > 1 and removed <= inside
    moved = {i for f in before.get_fragments() if f.fragment_id in removed
             for i in f.to_table(columns=["id"])["id"].to_pylist()}
    new = [f.to_table(columns=["id"])["id"].to_pylist() for f in after.get_fragments() if f.fragment_id not in old]
    assert all(ids == sorted(ids, reverse=True) for ids in new)  # each new fragment in the order asked
    assert sorted(i for ids in new for i in ids) == sorted(moved)
    assert LanceTable.for_name(spark, t).health().collect()[0].version == after.version
