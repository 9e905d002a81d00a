"""Clustered compaction under cancel, a killed driver and a corrupt source file (issue 26,
item 4): as for the plain compaction, nothing is committed, what the run wrote is removed (or
left for cleanup when the driver died), the table reads exactly as before, and the next run
clusters it; and a vector index keeps its recall against brute force. One Spark session
(local[2]); the driver kill runs in its own spark-sql process."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import lance
import numpy as np
import pytest

from conftest import NO_CLEANUP_FLOOR, ROOT, wait_for
from test_clustering import content, make_table

SPARK_CONF = NO_CLEANUP_FLOOR  # the cleanup step of the kill test removes files seconds old
ORDER = "zorder(tenant, ts)"


@pytest.fixture
def table(warehouse, request):
    name = "f" + request.node.name.split("[")[0][-20:].replace("-", "_")
    uri = make_table(str(warehouse), name, fragments=6, per=400)
    return f"db.{name}", uri


def data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def cluster_sql(table: str, options: str = "") -> str:
    extra = f", options => map({options})" if options else ""
    return (f"CALL lance.compact(table => '{table}', sort_order => '{ORDER}', "
            f"target_rows_per_fragment => 1000{extra})")


class Statement:
    """A CALL on its own thread under a job group, as a notebook or scheduler sends it."""

    def __init__(self, spark, sql: str, group: str) -> None:
        self.error: Exception | None = None
        self.ended: float | None = None
        ready = threading.Event()

        def run() -> None:
            spark.sparkContext.setJobGroup(group, "a clustering to cancel", interruptOnCancel=False)
            ready.set()
            try:
                spark.sql(sql).collect()
            except Exception as e:  # the cancel's failure, asserted by the test
                self.error = e
            finally:
                self.ended = time.monotonic()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(30)


def _statement_jobs(spark, group: str) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_a_cancel_before_the_commit_commits_nothing_and_removes_the_new_files(spark, table):
    """A plain cancelJobGroup while the clustering waits before its commit (its sort and write
    jobs are done; no job of it runs): the statement fails saying so, the version is unchanged,
    the fragments it wrote are gone, and the next clustering commits the same rows."""
    name, uri = table
    before = lance.dataset(uri)
    files = data_files(uri)
    group = "cluster-cancel"
    s = Statement(spark, cluster_sql(name, "'test_before_commit', 'writers.slow_commit'"), group)
    # the write job ran (new files exist) and the commit waits in slow_commit (3 s)
    wait_for(lambda: len(data_files(uri) - files) > 0 and _statement_jobs(spark, group) >= 2, timeout=120,
             step=0.05)
    time.sleep(0.5)
    cancelled_at = time.monotonic()
    spark.sparkContext.cancelJobGroup(group)
    s.thread.join(60)
    assert s.ended is not None, "the statement did not end after the cancel"
    message = str(s.error)
    assert s.error is not None and "cancelled" in message, message
    assert "clustering" in message and "job group" in message, message
    assert s.ended - cancelled_at < 10
    assert lance.dataset(uri).version == before.version
    assert data_files(uri) == files, "the cancelled run's new files were left behind"
    assert content(lance.dataset(uri)) == content(before)

    r = spark.sql(cluster_sql(name)).collect()[0]
    assert r.commits == 3 and r.sort_order == ORDER  # the Rewrite, the record, optimize_indices
    assert content(lance.dataset(uri)) == content(before)


def test_a_driver_killed_before_the_commit_leaves_the_table_as_it_was(spark, warehouse, table):
    """spark-sql dies between the write and the commit: the table is unchanged and reads
    exactly as before; the run's files are orphans that cleanup removes (dry run first); the next
    clustering commits."""
    name, uri = table
    before = lance.dataset(uri)
    files = data_files(uri)
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "-e", cluster_sql(name, "'test_kill_driver_before_commit', 'true'")],
        capture_output=True, text=True, timeout=600)
    assert p.returncode != 0, p.stdout[-2000:]
    assert lance.dataset(uri).version == before.version
    orphans = data_files(uri) - files
    assert orphans, "the run wrote no fragment before the kill"
    assert content(lance.dataset(uri)) == content(before)

    cleanup = (f"CALL lance.cleanup(table => '{name}', older_than => '0 seconds', delete_unverified => true, "
               "unverified_min_age => '0 seconds'")
    dry = spark.sql(cleanup + ", dry_run => true)").collect()[0]
    assert dry.dry_run and dry.data_files_removed >= len(orphans) and data_files(uri) >= orphans
    spark.sql(cleanup + ")").collect()
    assert not (data_files(uri) & orphans)
    assert content(lance.dataset(uri)) == content(before)

    r = spark.sql(cluster_sql(name)).collect()[0]
    assert r.commits == 3 and content(lance.dataset(uri)) == content(before)


def test_a_missing_source_file_fails_naming_it_and_commits_nothing(spark, table):
    """A data file of a source fragment is gone (a corrupt table): the clustering fails naming
    the missing file, nothing is committed and no file of the failed run is left."""
    name, uri = table
    before = lance.dataset(uri)
    victim = before.get_fragments()[2].data_files()[0].path
    victim = os.path.basename(victim)
    os.remove(os.path.join(uri, "data", victim))
    files = data_files(uri)
    with pytest.raises(Exception) as failed:
        spark.sql(cluster_sql(name)).collect()
    message = str(failed.value)
    assert "a data file the table references is missing" in message and victim in message, message
    assert "nothing was committed" in message and "Py4J" not in message, message
    assert lance.dataset(uri).version == before.version
    assert data_files(uri) == files, "the failed run left files behind"


def _neighbours(ds, q, k: int, use_index: bool) -> list[int]:
    nearest = {"column": "vector", "q": q, "k": k, "use_index": use_index}
    if use_index:
        nearest.update(nprobes=1)  # one partition of four, no refine: an approximate answer
    return ds.to_table(columns=["id"], nearest=nearest)["id"].to_pylist()


def test_vector_search_recall_is_kept_by_a_clustering(spark, warehouse):
    """A table with an IVF_PQ index on its vector column, clustered by tenant: the exact
    (brute-force) neighbours are the same rows before and after, the index covers every new
    fragment again (restored in the same call), and the index's recall against brute force does
    not drop (mean over 20 queries, k = 10)."""
    uri = make_table(str(warehouse), "vectors", fragments=6, per=400, indices=False)
    ds = lance.dataset(uri)
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    before = lance.dataset(uri)
    rng = np.random.default_rng(7)
    queries = [rng.standard_normal(4).astype(np.float32) for _ in range(20)]

    def recall(d) -> float:
        hits = [len(set(_neighbours(d, q, 10, True)) & set(_neighbours(d, q, 10, False))) / 10 for q in queries]
        return sum(hits) / len(hits)

    exact_before = [_neighbours(before, q, 10, False) for q in queries]
    recall_before = recall(before)
    r = spark.sql("CALL lance.compact(table => 'db.vectors', sort_order => 'tenant', "
                  "target_rows_per_fragment => 1000)").collect()[0]
    assert r.commits == 3 and "restored by optimize_indices" in r.index_coverage, r
    after = lance.dataset(uri)
    assert content(after) == content(before)
    assert len(after.get_fragments()) < len(before.get_fragments())
    vector_index = [ix for ix in after.list_indices() if ix["fields"] == ["vector"]]
    covered = {f for ix in vector_index for f in (ix["fragment_ids"] or [])}
    assert covered == {f.fragment_id for f in after.get_fragments()}, "the vector index lost coverage"
    assert [_neighbours(after, q, 10, False) for q in queries] == exact_before
    recall_after = recall(after)
    print(f"\nIVF_PQ recall@10 against brute force: {recall_before:.3f} before, {recall_after:.3f} after")
    assert recall_after >= recall_before - 0.05
