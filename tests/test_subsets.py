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
    extra = ", options => map('max_fragments', '100')" if strategy == "io_bounded" else ""
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
    with refused(path, "where 'nope > 1' is not a predicate Lance can evaluate"):
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
