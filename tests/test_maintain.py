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


def _with_a_missing_data_file(warehouse, name):
    """db.<name>: 20 small fragments (a compaction of several tasks at target 90) whose fourth
    fragment's data file is gone: its task fails, the others do not."""
    import os

    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=20, rows_per_fragment=30)
    os.remove(path / "data" / ds.get_fragments()[3].metadata.files[0].path)
    return f"db.{name}", path


def test_fail_on_error_fails_on_failed_tasks_after_committing_the_others(spark, warehouse):
    """With a budget (partial progress) a task that fails all its attempts is counted in the
    compact row and the statement succeeds (the default, as before); with fail_on_error the
    statement then fails naming the task's error and what was committed."""
    from lance_compact import maintain

    call = "target_rows_per_fragment => 90, max_rewrite_bytes => 1000000000"
    t, path = _with_a_missing_data_file(warehouse, "maint_tasks_default")
    v = lance.dataset(str(path)).version
    s = steps(spark.sql(f"CALL lance.maintain(table => '{t}', {call})").collect())
    assert s["compact"].ran and "1 tasks failed" in s["compact"].outcome, s
    assert lance.dataset(str(path)).version > v

    t, path = _with_a_missing_data_file(warehouse, "maint_tasks_fail")
    v = lance.dataset(str(path)).version
    with pytest.raises(Exception) as e:
        spark.sql(f"CALL lance.maintain(table => '{t}', {call}, fail_on_error => true)").collect()
    after = lance.dataset(str(path)).version
    assert after > v  # the other tasks were committed
    message = str(e.value)
    assert e.value.getCondition() == "LANCE_MAINTENANCE_FAILED" and e.value.getSqlState() == "38000"
    assert f"table {t}: maintain failed (fail_on_error => true)" in message
    assert "1 compaction task failed all its attempts" in message and "of fragment 3 is missing" in message
    assert f"committed: compact (version {after})" in message and "[LANCE_COMPACT]" not in message
    # the same from PySpark; a run with nothing failing is not affected
    t, path = _with_a_missing_data_file(warehouse, "maint_tasks_api")
    with pytest.raises(Exception, match="LANCE_MAINTENANCE_FAILED.*1 compaction task failed"):
        maintain(spark, t, target_rows_per_fragment=90, max_rewrite_bytes=10 ** 9, fail_on_error=True)
    rows = maintain(spark, t, target_rows_per_fragment=90, fail_on_error=True, dry_run=True).collect()
    assert [r.step for r in rows] == ["compact", "optimize_indices", "cleanup"]
    with pytest.raises(Exception, match="fail_on_error"):
        spark.sql(f"CALL lance.maintain(table => '{t}', fail_on_error => 'yes')").collect()


def test_an_unexpected_error_names_the_engine_log_that_holds_its_traceback(spark, warehouse):
    """The engine's log is a temporary file here (no spark.lance.compact.engine.log): the error
    names it, and it holds the error's traceback (test_engine_robustness.py: a configured one)."""
    import re
    from pathlib import Path

    path = warehouse / "db" / "maint_unexpected.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path), fragments=12, rows_per_fragment=30)
    v = lance.dataset(str(path)).version
    with pytest.raises(Exception) as e:
        spark.sql("CALL lance.compact(table => 'db.maint_unexpected', target_rows_per_fragment => 300, "
                  "options => map('test_fail_at', 'commit:writers.raise_unrecognized'))").collect()
    assert lance.dataset(str(path)).version == v
    message = str(e.value)
    assert e.value.getCondition() == "LANCE_INTERNAL_ERROR", message
    named = re.search(r"please report it with the engine's log, (\S+), which holds its traceback", message)
    engine = spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession)
    assert named and named.group(1) == engine.logFile().getAbsolutePath(), message
    text = Path(named.group(1)).read_text(errors="replace")
    assert re.search(r"ERROR .*table db\.maint_unexpected: run failed: injected into maint_unexpected\.lance", text)
    trace = text[text.index("run failed: injected into maint_unexpected.lance"):]
    assert "Traceback (most recent call last)" in trace and "in nested_helper" in trace, trace[:3000]
    assert "ZeroDivisionError: injected into maint_unexpected.lance" in trace
    assert text.count("in nested_helper") == 1  # once, however many times it was named
