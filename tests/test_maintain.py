"""CALL lance.maintain: compaction, index optimization and cleanup, each only when due; a row
per step saying why; dry_run changes nothing; the same from PySpark."""
import shutil
import time

import lance
import pytest

from conftest import NO_VERSION_FLOOR
from oracle import batch, content, degraded_table
from index_checks import index_agrees_with_scan

SPARK_CONF = NO_VERSION_FLOOR  # the operator's: versions a second old may be cleaned up


@pytest.fixture
def table(warehouse, request):
    path = warehouse / "db" / f"maint_{request.node.name[5:35]}.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=40, rows_per_fragment=30)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    lance.write_dataset(batch(50_000, 90), str(path), mode="append", max_rows_per_file=30)  # unindexed
    time.sleep(1.1)  # so that '1 seconds' finds old versions
    return f"db.{path.name[:-6]}", path


def steps(rows):
    return {r.step: r for r in rows}


def test_dry_run_says_what_is_due_and_changes_nothing(spark, table):
    t, path = table
    version = lance.dataset(str(path)).version
    rows = spark.sql(f"CALL lance.maintain(table => '{t}', target_rows_per_fragment => 300, "
                     "older_than => '1 seconds', dry_run => true)").collect()
    assert [r.step for r in rows] == ["compact", "optimize_indices", "cleanup"]
    s = steps(rows)
    assert not any(r.ran for r in rows) and all(r.reason.startswith("due") for r in rows), rows
    assert "fragments under 300 rows" in s["compact"].reason
    assert "vector_idx" in s["optimize_indices"].reason
    assert lance.dataset(str(path)).version == version


def test_maintain_does_what_is_due_then_nothing(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    expected = content(before)
    s = steps(spark.sql(f"CALL lance.maintain(table => '{t}', target_rows_per_fragment => 300, "
                        "older_than => '1 seconds')").collect())
    after = lance.dataset(str(path))
    assert s["compact"].ran and len(after.get_fragments()) < len(before.get_fragments())
    assert s["optimize_indices"].ran and "-> 0" in s["optimize_indices"].outcome
    assert s["cleanup"].ran and len(after.versions()) < len(before.versions()) + 4
    assert content(after) == expected
    index_agrees_with_scan(after)
    again = steps(spark.sql(f"CALL lance.maintain(table => '{t}', target_rows_per_fragment => 300, "
                            "older_than => '7 days')").collect())
    assert not any(r.ran for r in again.values())
    assert again["compact"].reason.startswith("not due") and again["cleanup"].reason.startswith("not due")
    assert lance.dataset(str(path)).version == after.version


def test_from_pyspark(spark, table):
    from lance_compact import maintain
    t, path = table
    rows = maintain(spark, t, min_small_fragments=1000, older_than="30 days").collect()
    s = steps(rows)
    # fragments over the deletion threshold make compaction due whatever the small count
    assert s["compact"].ran and "4 over the deletion threshold" in s["compact"].reason
    assert s["optimize_indices"].ran  # appended fragments were unindexed
    assert not s["cleanup"].ran and "no version older than 30 days" in s["cleanup"].reason
    s = steps(maintain(spark, t, min_small_fragments=1000, older_than="30 days").collect())
    assert not s["compact"].ran and "fewer than 1000 small fragments" in s["compact"].reason


def test_unknown_parameter_is_named(spark, table):
    t, _ = table
    with pytest.raises(Exception, match="UNRECOGNIZED_PARAMETER_NAME|nope"):
        spark.sql(f"CALL lance.maintain(table => '{t}', nope => 1)").collect()
