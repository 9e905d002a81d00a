"""CALL lance.optimize_indices: the fragments indices do not cover (appended, or compacted
with a concurrent delete carried over) are added to them by Lance; queries equal a scan
before and after; dry_run reports only."""
import shutil

import lance
import pytest

from conftest import refused
from oracle import batch, content
from index_checks import index_agrees_with_scan

SPARK_MASTER = "local[2,2]"


@pytest.fixture
def indexed(warehouse, request):
    path = warehouse / "db" / f"oi_{request.node.name[:30].replace('[', '_').replace(']', '')}.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = lance.write_dataset(batch(0, 1200), str(path), max_rows_per_file=60)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    lance.write_dataset(batch(5000, 300), str(path), mode="append", max_rows_per_file=60)  # unindexed
    return f"db.{path.name[:-6]}", path


def unindexed(spark, t):
    layout = spark.sql(f"CALL lance.describe_layout(table => '{t}')").collect()[0]
    return {ix.name: ix.unindexed_fragments for ix in layout.indices}


def test_dry_run_reports_and_changes_nothing(spark, indexed):
    t, path = indexed
    version = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', dry_run => true)").collect()[0]
    assert r.dry_run and r.indices_optimized == 0 and r.new_version == version
    assert r.unindexed_fragments_before == r.unindexed_fragments_after == 10  # 5 fragments x 2 indices
    assert {i.name: i.unindexed_fragments_before for i in r.indices} == {"id_idx": 5, "vector_idx": 5}
    assert lance.dataset(str(path)).version == version


def test_after_a_carried_over_compaction_every_fragment_is_indexed_again(spark, indexed):
    t, path = indexed
    # restore_indices off: the compaction leaves the carried-over fragments to optimize_indices
    c = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 600, options => map("
                  "'test_before_commit', 'writers.delete_everywhere', 'restore_indices', 'false'))").collect()[0]
    assert c.tasks_rebased >= 1
    ds = lance.dataset(str(path))
    expected = content(ds)
    index_agrees_with_scan(ds)
    assert all(n >= 1 for n in unindexed(spark, t).values())
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
    after = lance.dataset(str(path))
    assert r.indices_optimized == 2 and r.unindexed_fragments_after == 0 and r.new_version == after.version
    assert unindexed(spark, t) == {"id_idx": 0, "vector_idx": 0}
    assert content(after) == expected
    index_agrees_with_scan(after)


def test_one_index_by_name_and_retrain(spark, indexed):
    t, path = indexed
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'id_idx')").collect()[0]
    assert [i.name for i in r.indices] == ["id_idx"] and r.unindexed_fragments_after == 0
    assert unindexed(spark, t) == {"id_idx": 0, "vector_idx": 5}
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'vector_idx', retrain => true)").collect()[0]
    assert r.indices_optimized == 1 and unindexed(spark, t) == {"id_idx": 0, "vector_idx": 0}
    index_agrees_with_scan(lance.dataset(str(path)))


def test_an_unknown_index_is_named(spark, indexed):
    t, path = indexed
    with refused(path, "no index named nope; its indices are: id_idx, vector_idx"):
        spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'nope')").collect()
