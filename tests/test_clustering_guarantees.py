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
from oracle import says_committed
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


# Issue 33: every failure says what landed. The chaos tester's markers of a clustering run.
POINTS = ["sampling", "write", "commit", "record", "index_restore"]


def coverage(uri: str) -> dict[str, tuple[int, int]]:
    """Per user index: (fragments it covers, fragments in the table)."""
    ds = lance.dataset(uri)
    frags = {f.fragment_id for f in ds.get_fragments()}
    out: dict[str, set] = {}
    for ix in ds.list_indices():
        if not ix["name"].startswith("__"):
            out.setdefault(ix["name"], set()).update(set(ix["fragment_ids"] or []) & frags)
    return {n: (len(c), len(frags)) for n, c in out.items()}


def fully_covered(uri: str) -> bool:
    return all(c == t for c, t in coverage(uri).values())


def attempt(spark, sql: str):
    """(the row, None) or (None, the error's text)."""
    try:
        return spark.sql(sql).collect()[0], None
    except Exception as e:  # judged by the caller
        return None, str(e)


@pytest.mark.parametrize("point", POINTS)
def test_a_full_disk_at_each_point_says_what_landed(spark, table, point):
    """A full disk's error (ENOSPC, as Lance raises it) at each marker of a clustering run: the
    error names the table, calls it a storage failure (not our bug) and names the versions
    committed as the table's own history shows them; a run failing before or at its commit
    leaves no file behind; the rows are exact. At the record the run goes on (the record is a
    hint: its fragments count as unclustered) and restores the indices."""
    name, uri = table
    before = lance.dataset(uri)
    files = data_files(uri)
    row, error = attempt(spark, cluster_sql(name, f"'test_fail_at', '{point}:enospc'"))
    after = lance.dataset(uri)
    landed = list(range(before.version + 1, after.version + 1))
    assert content(after) == content(before)
    if point == "record":
        assert error is None, error
        assert row.commits == len(landed) == 2 and row.new_version == after.version, row  # Rewrite, restore
        assert "restored by optimize_indices" in row.index_coverage and fully_covered(uri), row
        return
    assert row is None and error is not None
    assert f"table {name}:" in error and "storage full" in error and "not a lance_compact bug" in error, error
    assert "please report" not in error and "LANCE_STORAGE_ERROR" in error, error
    assert says_committed(error, landed), (landed, error)
    if point == "index_restore":
        assert len(landed) == 2, landed  # the Rewrite and its record
        assert "the index restore did not land" in error and "tenant_idx" in error, error
        assert not fully_covered(uri)
    else:
        assert landed == [] and data_files(uri) == files, "the failed run left files behind"
        if point == "commit":
            assert "committing the clustering failed" in error and "did not land" in error, error
            assert "files it wrote were removed" in error, error


def test_a_store_quota_at_the_commit_is_a_storage_failure(spark, table):
    """An object store's quota refusal (HTTP 507) at the commit: a storage failure, nothing
    committed, no file left."""
    name, uri = table
    before = lance.dataset(uri)
    files = data_files(uri)
    row, error = attempt(spark, cluster_sql(name, "'test_fail_at', 'commit:quota'"))
    assert row is None and "507" in error and "storage full" in error and "object store" in error, error
    assert "nothing was committed" in error and f"table {name}:" in error, error
    assert lance.dataset(uri).version == before.version and data_files(uri) == files


def test_an_index_left_uncovered_is_restored_by_the_next_run(spark, table):
    """The index restore fails after the Rewrite (the BTREE covers none of the new fragments);
    the next clustering run, which has nothing to cluster, finds the index covering less than
    the table and restores it, and says so in its row."""
    name, uri = table
    _, error = attempt(spark, cluster_sql(name, "'test_fail_at', 'index_restore:store'"))
    assert error is not None and "object store" in error, error
    left = coverage(uri)
    assert left["tenant_idx"][0] < left["tenant_idx"][1], left
    before = lance.dataset(uri)
    r = spark.sql(cluster_sql(name)).collect()[0]
    assert r.tasks == 0 and r.commits == 1, r  # nothing to cluster; the restore
    assert "tenant_idx: covered" in r.index_coverage and "left so before this run" in r.index_coverage, r
    assert "restored by optimize_indices" in r.index_coverage, r
    assert fully_covered(uri), coverage(uri)
    assert content(lance.dataset(uri)) == content(before)


def test_a_kill_between_rewrite_and_index_restore_is_repaired_by_maintain(spark, warehouse, table):
    """spark-sql killed after the Rewrite and its record, before the index restore: the rows
    are exact, the indices cover less than the table; the next maintain restores them."""
    name, uri = table
    before = lance.dataset(uri)
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "-e", cluster_sql(name, "'test_fail_at', 'index_restore:kill'")],
        capture_output=True, text=True, timeout=600)
    assert p.returncode != 0, p.stdout[-2000:]
    assert content(lance.dataset(uri)) == content(before)
    # killed where it was asked to (after the Rewrite and its record), not before for another reason
    assert lance.dataset(uri).version > before.version, (p.returncode, p.stderr[-3000:])
    left = coverage(uri)
    assert not fully_covered(uri) and left["tenant_idx"][0] < left["tenant_idx"][1], (left, p.stderr[-3000:])
    rows = {r.step: r for r in spark.sql(f"CALL lance.maintain(table => '{name}')").collect()}
    assert fully_covered(uri), (coverage(uri), rows)
    assert content(lance.dataset(uri)) == content(before)


def test_a_flipped_footer_byte_is_named_damaged(spark, table):
    """A byte of a source data file's footer flipped: the clustering fails naming the file,
    its fragment and 'damaged', commits nothing and leaves no file."""
    name, uri = table
    before = lance.dataset(uri)
    fragment = before.get_fragments()[2]
    victim = fragment.data_files()[0].path
    path = os.path.join(uri, "data", victim)
    with open(path, "r+b") as f:
        f.seek(-40, os.SEEK_END)
        b = f.read(1)
        f.seek(-40, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    files = data_files(uri)
    _, error = attempt(spark, cluster_sql(name))
    assert error is not None
    assert f"data/{victim} of fragment {fragment.fragment_id} is damaged" in error, error
    assert "LANCE_CORRUPT_FILE" in error, error
    assert "nothing was committed" in error and f"table {name}:" in error and "please report" not in error, error
    assert lance.dataset(uri).version == before.version and data_files(uri) == files
