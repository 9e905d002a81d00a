"""No statement waits for a slot it holds itself, and nothing holds a slot it does not use
(issue 33, item 4). A statement's cancel is watched for with no job of its own
(CancelWatch.scala): on ``local[1]`` every procedure answers -- a clustering compaction (a sort
job of two stages), ``maintain`` of a table with CLUSTER BY, ``ALTER TABLE ... CLUSTER BY`` then
``maintain_warehouse`` -- where the former watch job took the only slot between the sort's
stages and held it for 10 minutes; with every slot of the application taken by another pool's
job (FAIR) the statement still finishes; a job group cancel sent while the statement works on
the driver alone stops it, and no task of any job runs then.

One ``local[1]`` session in FAIR mode (the statements run in its default pool, FIFO within it,
unless a test names a pool); the driver pauses ``DRIVER_PAUSE_MS`` before each commit and step
(test hook), so the driver-only phase can be caught. Each statement runs on its own thread with
a time limit that fails the test instead of hanging it.
"""
import os
import threading
import time

import lance
import pytest

from conftest import lance_session, wait_for
from oracle import content, degraded_table

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
DRIVER_PAUSE_MS = 800
BOUND_S = 60  # each statement; they take 1-8 s here (the former watch: 602.5 s or no answer)
POOLS = """<?xml version="1.0"?>
<allocations>
  <pool name="lance"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>1</minShare></pool>
  <pool name="hog"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


@pytest.fixture(scope="module")
def spark(warehouse, tmp_path_factory):
    pools = tmp_path_factory.mktemp("pools") / "fair.xml"
    pools.write_text(POOLS)
    session = lance_session("local[1]", "lance-compact-one-slot", str(warehouse),
                            {"spark.scheduler.mode": "FAIR",
                             "spark.scheduler.allocation.file": str(pools),
                             "spark.lance.compact.test.driverPauseMs": str(DRIVER_PAUSE_MS)})
    # the engine starts here, not within a test's bound
    degraded_table(str(warehouse / "warm" / "t.lance"), fragments=2)
    session.sql("CALL lance.describe_layout(table => 'warm.t')").collect()
    yield session
    session.stop()


def bounded(spark, sql: str, group: str, pool: str | None = None, bound: float = BOUND_S):
    """``sql``'s rows and seconds, run on its own thread under job group ``group`` (and
    ``pool``); a statement still running after ``bound`` s is cancelled and fails the test."""
    sc = spark.sparkContext
    out: dict = {}

    def run() -> None:
        sc.setJobGroup(group, "bounded statement")
        sc.setLocalProperty("spark.scheduler.pool", pool)
        try:
            out["rows"] = spark.sql(sql).collect()
        except Exception as e:
            out["error"] = e
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.scheduler.pool", None)

    started = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    seconds = time.monotonic() - started
    if t.is_alive():
        sc.cancelJobGroup(group)
        t.join(30)
        pytest.fail(f"no answer within {bound} s: {sql}")
    print(f"\n{seconds:.2f} s: {sql}")
    if "error" in out:
        raise out["error"]
    return out["rows"], seconds


def _table(warehouse, ns: str, name: str = "t", fragments: int = 24):
    path = warehouse / ns / f"{name}.lance"
    return path, degraded_table(str(path), fragments=fragments)


CLUSTER = "sort_order => 'category'"
STATEMENTS = {
    "compact": "CALL lance.compact(table => '{t}', target_rows_per_fragment => 300)",
    "clustering compact": f"CALL lance.compact(table => '{{t}}', target_rows_per_fragment => 300, {CLUSTER})",
    "plan_compaction (clustering)": f"CALL lance.plan_compaction(table => '{{t}}', {CLUSTER})",
    "describe_layout": "CALL lance.describe_layout(table => '{t}')",
    "optimize_indices": "CALL lance.optimize_indices(table => '{t}')",
    "cleanup": "CALL lance.cleanup(table => '{t}')",
    "maintain": "CALL lance.maintain(table => '{t}', target_rows_per_fragment => 300)",
    "maintain of a CLUSTER BY table": "CALL lance.maintain(table => '{t}', target_rows_per_fragment => 300)",
    "maintain_warehouse after CLUSTER BY":
        "CALL lance.maintain_warehouse(namespace => '{ns}', target_rows_per_fragment => 300)",
    # a test hook keeps it on Spark tasks: a training job, then a segment job, on the only slot
    "create_index on Spark tasks": "CALL lance.create_index(table => '{t}', column => 'vector', index_type => "
                                   "'IVF_PQ', options => map('num_partitions', '4', 'num_sub_vectors', '2', "
                                   "'rows_per_segment', '1000', 'test_task_sleep_ms', 'all:1'))",
    "create_index in the engine": "CALL lance.create_index(table => '{t}', column => 'id', index_type => 'BTREE')",
}


@pytest.mark.parametrize("what", list(STATEMENTS))
def test_every_procedure_answers_on_one_slot(spark, warehouse, what):
    ns = "s" + str(abs(hash(what)) % 10**6)
    path, before = _table(warehouse, ns)
    if what == "optimize_indices":
        before.create_scalar_index("id", "BTREE")
        lance.write_dataset(before.to_table(filter="id < 40"), str(path), mode="append")
        before = lance.dataset(str(path))
    if "CLUSTER BY" in what:
        spark.sql(f"ALTER TABLE lance.{ns}.t CLUSTER BY (category)")
        before = lance.dataset(str(path))
    rows, seconds = bounded(spark, STATEMENTS[what].format(t=f"{ns}.t", ns=ns), f"one-slot-{ns}")
    assert rows and seconds < BOUND_S
    after = lance.dataset(str(path))
    assert content(after) == content(before)
    if what in ("compact", "clustering compact", "maintain", "maintain of a CLUSTER BY table",
                "maintain_warehouse after CLUSTER BY"):
        assert len(after.get_fragments()) < len(before.get_fragments()), what
    if "clust" in what.lower() and "plan" not in what:
        assert "clustering" in str(rows) or what.startswith("maintain"), rows
    if what.startswith("create_index"):
        assert rows[0].built_by == ("spark tasks" if "Spark" in what else "engine")
        assert len(after.describe_indices()) == 1 and after.version == before.version + 1


def test_a_fair_pool_at_its_limit_still_runs_a_clustering(spark, warehouse):
    """Another pool's job takes the application's only slot with many short tasks; a
    clustering compaction in its own pool (minShare 1) finishes long before that job would."""
    sc = spark.sparkContext
    path, before = _table(warehouse, "fairpool")
    hog_done = threading.Event()

    def hog() -> None:
        sc.setLocalProperty("spark.scheduler.pool", "hog")
        sc.setJobGroup("hog", "fills every slot")
        try:
            sc.parallelize(range(400), 400).foreach(lambda _: time.sleep(0.3))
        except Exception:
            pass  # cancelled below
        finally:
            hog_done.set()

    threading.Thread(target=hog, daemon=True).start()
    tracker = sc.statusTracker()
    wait_for(lambda: any(tracker.getJobInfo(j).status == "RUNNING" for j in tracker.getJobIdsForGroup("hog")),
             timeout=30, step=0.05)
    try:
        rows, seconds = bounded(spark, f"CALL lance.compact(table => 'fairpool.t', "
                                       f"target_rows_per_fragment => 300, {CLUSTER})", "fair-lance", pool="lance")
        assert not hog_done.is_set(), "the other pool's job ended first: the slot was never contended"
    finally:
        sc.cancelJobGroup("hog")
        hog_done.wait(60)
    assert rows[0].strategy == "clustering" and rows[0].commits >= 1
    assert content(lance.dataset(str(path))) == content(before)


CANCELLED = {  # statements whose Spark jobs end before a driver-only step and a commit
    "clustering": "CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, " + CLUSTER + ")",
    "create_index": STATEMENTS["create_index on Spark tasks"],
}


@pytest.mark.parametrize("what", list(CANCELLED))
def test_a_group_cancel_in_driver_only_work_stops_the_statement_on_one_slot(spark, warehouse, what):
    """The statement's jobs ended and the driver pauses before the commit: no job and no task
    of any job runs (nothing holds the slot); a plain cancelJobGroup still stops the statement,
    nothing is committed, and the next statement works."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    ns = f"driveronly{what.replace('_', '')}"
    path, before = _table(warehouse, ns)
    group = f"driver-only-cancel-{what}"
    out: dict = {}

    def run() -> None:
        sc.setJobGroup(group, "to cancel")
        try:
            spark.sql(CANCELLED[what].format(t=f"{ns}.t")).collect()
        except Exception as e:
            out["error"] = str(e)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def jobs(status=None):  # jobs that run tasks (not the statement's progress marks, of no stage)
        return [j for j in tracker.getJobIdsForGroup(group)
                if tracker.getJobInfo(j) is not None and len(tracker.getJobInfo(j).stageIds) > 0
                and (status is None or tracker.getJobInfo(j).status == status)]
    def driver_only() -> bool:  # its jobs ran, and none has run for 0.3 s: the pause before the commit
        seen = jobs()
        if not jobs("SUCCEEDED") or jobs("RUNNING"):
            return False
        time.sleep(0.3)
        return jobs() == seen
    wait_for(driver_only, timeout=BOUND_S, step=0.05)
    assert not jobs("RUNNING") and not tracker.getActiveStageIds(), \
        "a job or task ran while the statement worked on the driver alone"
    jobs_at_cancel = jobs()
    cancelled_at = time.monotonic()
    sc.cancelJobGroup(group)
    t.join(BOUND_S)
    assert not t.is_alive(), "the cancelled statement did not end"
    print(f"\njob group cancel of {what} in driver-only work on local[1] -> failed in "
          f"{time.monotonic() - cancelled_at:.2f} s")
    assert "cancelled" in out.get("error", "") and f"job group {group}" in out["error"], out
    assert "nothing was committed" in out["error"], out
    after = lance.dataset(str(path))
    assert after.version == before.version and not after.describe_indices()
    assert jobs() == jobs_at_cancel, "a job started after the cancel"
    rows, _ = bounded(spark, f"CALL lance.compact(table => '{ns}.t', target_rows_per_fragment => 300)",
                      f"driver-only-after-{what}")
    assert rows[0].commits == 1 and content(lance.dataset(str(path))) == content(before)


# Times or measures the machine: run alone, not beside other modules (bin/test).
pytestmark = pytest.mark.serial
