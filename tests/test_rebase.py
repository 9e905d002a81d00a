"""A compaction lands while writers delete and update: their deletions are carried over onto
the compacted fragments (tasks_rebased); everything that cannot be carried over falls back
to planning again, and says so. The writer acts right before the commit (test hook
``test_before_commit``); the oracle is the table as the writer left it."""
import hashlib
import re
import shutil
import subprocess

import lance
import pyarrow as pa
import pytest

from conftest import NO_CLEANUP_FLOOR, ROOT, compact_call, degraded_table_for
from oracle import batch, content
from index_checks import index_agrees_with_scan

SPARK_MASTER = "local[2,2]"
# the operator allows cleanup of orphans of any age (tests below); every rewrite a Spark job, as
# on a cluster (local mode would rewrite these small batches in the engine: engine_rewrite.py)
SPARK_CONF = {**NO_CLEANUP_FLOOR, "spark.lance.compact.engineRewrite.maxBatchBytes": "0"}


def unique_name(request) -> str:
    """A table name per test and parameter (the writers keep state per table)."""
    digest = hashlib.sha1(request.node.name.encode()).hexdigest()[:8]
    return re.sub(r"\W+", "_", request.node.name)[:40] + "_" + digest


@pytest.fixture
def table(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=40)


compact = compact_call


def with_writer(spark, t, writer, args="", options=""):
    extra = f", {args}" if args else ""
    more = f", {options}" if options else ""
    return compact(spark, t, f"options => map('test_before_commit', 'writers.{writer}'{more}){extra}")


def as_the_writer_left_it(path, before):
    """The oracle: the table right after the writer's commit (the version after ``before``)."""
    return content(lance.dataset(str(path), version=before.version + 1))


@pytest.mark.parametrize("writer", ["delete_in_first_fragment", "delete_everywhere", "update_some",
                                    "upsert_some"])
def test_deletes_updates_and_upserts_are_carried_over(spark, table, writer):
    t, path = table
    before = lance.dataset(str(path))
    n = len(spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300)").collect())
    r = with_writer(spark, t, writer)
    after = lance.dataset(str(path))
    assert r.tasks == n and r.tasks_rebased >= 1 and r.retries == 0 and r.tasks_conflicted == 0
    assert r.conflicts == f"{r.tasks_rebased} tasks committed with concurrent deletes carried over"
    assert content(after) == as_the_writer_left_it(path, before)
    ids = after.to_table(columns=["id"])["id"].to_pylist()
    assert len(ids) == len(set(ids))  # an updated row is there once: the updater's version
    compacted = {f.fragment_id for f in after.get_fragments()}
    assert len(compacted) < len(before.get_fragments())
    # no detached version is left behind
    assert not [v for v in (path / "_versions").iterdir() if v.name.startswith("d")]


@pytest.mark.parametrize("writer,why", [
    ("remove_first_fragment", r"fragment \d+ was removed"),  # a fragment removed outright
    ("add_column", r"fragment \d+ had its data replaced"),  # a Merge
    ("compact_concurrently", r"fragment \d+ was removed"),  # a concurrent Rewrite
])
def test_what_cannot_be_carried_over_is_planned_again(spark, table, writer, why):
    t, path = table
    before = lance.dataset(str(path))
    r = with_writer(spark, t, writer)
    after = lance.dataset(str(path))
    assert r.retries == 1 and r.tasks_conflicted == 0
    assert re.search(r"planned again \(.*" + why, r.conflicts), r.conflicts
    assert content(after) == as_the_writer_left_it(path, before)


def test_a_restore_still_fails_the_call(spark, table):
    t, path = table
    with pytest.raises(Exception, match="incompatible with compaction"):
        with_writer(spark, t, "restore_previous")


@pytest.fixture
def indexed(warehouse, request):
    name = unique_name(request)
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    stable = "stable" in request.node.name
    ds = lance.write_dataset(batch(0, 2400), str(path), max_rows_per_file=60, enable_stable_row_ids=stable)
    ds.delete("id % 13 = 0")
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    return f"db.{name}", path


@pytest.mark.parametrize("args", ["", "defer_index_remap => true", "partial_progress => true, max_commits => 2"])
def test_indices_answer_like_a_scan_and_unindexed_fragments_are_reported(spark, indexed, args):
    t, path = indexed
    before = lance.dataset(str(path))
    # the compaction's own index restore off: the carried-over fragments stay unindexed, to be reported
    r = with_writer(spark, t, "delete_everywhere", args, "'restore_indices', 'false'")
    after = lance.dataset(str(path))
    assert r.tasks_rebased >= 1 and r.tasks_conflicted == 0
    # the writer deletes id % 97 = k before the k-th commit of a batch (two with partial progress)
    batches = 2 if "partial_progress" in args else 1
    expected = content(before)
    keep = [i % 97 >= batches for i in expected["id"].to_pylist()]
    assert content(after) == expected.filter(pa.array(keep))
    assert len(after.get_fragments()) < len(before.get_fragments())
    index_agrees_with_scan(after)
    layout = spark.sql(f"CALL lance.describe_layout(table => '{t}')").collect()[0]
    unindexed = {ix.name: ix.unindexed_fragments for ix in layout.indices}
    assert unindexed["id_idx"] >= 1 and unindexed["vector_idx"] >= 1  # the carried-over ones, reported


def test_stable_row_ids(spark, indexed):
    t, path = indexed
    before = lance.dataset(str(path))
    assert before.has_stable_row_ids
    r = with_writer(spark, t, "update_some")
    after = lance.dataset(str(path))
    assert r.tasks_rebased >= 1
    assert content(after) == as_the_writer_left_it(path, before)
    index_agrees_with_scan(after)
    # Stable: every row keeps the row id it had once the writer was done, through the rewrite
    # and the carried-over deletions.
    assert after.has_stable_row_ids
    assert row_ids(after) == row_ids(lance.dataset(str(path), version=before.version + 1))


def row_ids(ds) -> dict[int, int]:
    """id -> Lance's row id, for every live row."""
    t = ds.to_table(columns=["id"], with_row_id=True)
    return dict(zip(t["id"].to_pylist(), t["_rowid"].to_pylist()))


def test_driver_killed_before_the_carried_over_commit_then_cleanup(spark, table, warehouse):
    t, path = table
    before = lance.dataset(str(path))
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "-e", f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, options => map("
               "'test_before_commit', 'writers.delete_in_first_fragment', "
               "'test_kill_driver_before_carried_commit', 'true'))"],
        capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    mid = lance.dataset(str(path))
    assert content(mid) == as_the_writer_left_it(path, before)  # nothing lost, nothing revived
    in_table = {f.fragment_id for f in mid.get_fragments()}

    def orphan_deletions():  # deletion files named for fragments the table does not hold
        return {f.name for f in (path / "_deletions").iterdir() if int(f.name.split("-")[0]) not in in_table}

    assert orphan_deletions()  # the carried-over deletion files were written, never committed
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                     "delete_unverified => true, unverified_min_age => '0 seconds')").collect()[0]
    assert done.data_files_removed >= 1 and not orphan_deletions()
    assert content(lance.dataset(str(path))) == content(mid)
    r = compact(spark, t)
    assert r.tasks >= 1 and content(lance.dataset(str(path))) == content(mid)
