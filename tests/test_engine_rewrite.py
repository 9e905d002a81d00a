"""Small batches rewritten in the engine process (compaction/engine_rewrite.py): the same
layout and rows as pylance's compact_files, no Spark job for the rewrite, a cancel that stops
before the next task and before the commit, a failing task failing the run as a failed Spark
task would, and the setting's defaults (local mode on, a cluster off)."""
from __future__ import annotations

import os
import shutil
import time

import lance
import pytest

from oracle import content, degraded_table
from lance_compact.compaction import engine_rewrite
from lance_compact.compaction.orchestrate import Run, _batches, make_plan
from lance_compact.compaction.request import CompactionRequest
from lance_compact.errors import CompactionError
from lance_compact.options import result_columns
from lance_compact.runtime import cancellation
from lance_compact.runtime.envelope import Envelope


def request_for(uri: str, **params) -> CompactionRequest:
    return CompactionRequest.of(Envelope.parse("compact", {
        "table": "db.t", "uri": uri, "params": {"target_rows_per_fragment": 300, **params}}))


def layout(ds):
    return [(f.count_rows(), f.metadata.physical_rows) for f in ds.get_fragments()]


def pylance_layout(path, tmp_path):
    copy = tmp_path / "pylance.lance"
    shutil.copytree(path, copy)
    lance.dataset(str(copy)).optimize.compact_files(target_rows_per_fragment=300)
    return layout(lance.dataset(str(copy)))


class InEngine:
    """The engine's runner without Spark: every batch in the engine (the limit is large)."""

    def run(self, request, batch, number, dataset=None):
        assert engine_rewrite.fits(request, batch, 1 << 30)
        return engine_rewrite.run_in_engine(request, batch, number, dataset, attempts=1)


def start(uri: str, **params) -> Run:
    request = request_for(uri, **params)
    return Run(request, *make_plan(request), 0.0)


@pytest.mark.parametrize("master,conf,expected", [
    ("local[2]", {}, 256 << 20), ("local", {}, 256 << 20), ("local[2,3]", {}, 256 << 20),
    ("spark://127.0.0.1:7077", {}, 0), ("yarn", {}, 0),
    ("local[2]", {engine_rewrite.MAX_BATCH_BYTES: "0"}, 0),
    ("spark://h:7077", {engine_rewrite.MAX_BATCH_BYTES: "64m"}, 64 << 20),
    ("local[*]", {engine_rewrite.MAX_BATCH_BYTES: "1048576"}, 1 << 20),
    ("local[2]", {engine_rewrite.MAX_BATCH_BYTES: "lots"}, 256 << 20),  # not a size: the default, warned
    # the former name, read for one release; the new name wins when both are set
    ("spark://h:7077", {engine_rewrite.FORMER_MAX_BYTES: "64m"}, 64 << 20),
    ("local[2]", {engine_rewrite.FORMER_MAX_BYTES: "0"}, 0),
    ("local[2]", {engine_rewrite.FORMER_MAX_BYTES: "0", engine_rewrite.MAX_BATCH_BYTES: "1m"}, 1 << 20),
])
def test_the_limit_defaults_to_local_mode_only(master, conf, expected):
    assert engine_rewrite.max_batch_bytes(conf, master) == expected


def test_a_batch_fits_by_the_bytes_it_reads_and_never_with_task_hooks(tmp_path):
    uri = str(tmp_path / "t.lance")
    degraded_table(uri, fragments=12)
    run = start(uri)
    batch = run.pending[0]
    total = sum(r[7] for r in batch.rows)
    assert engine_rewrite.fits(run.request, batch, total)
    assert not engine_rewrite.fits(run.request, batch, total - 1)
    assert not engine_rewrite.fits(run.request, batch, 0)
    hooked = request_for(uri)
    hooked.hooks["test_fail_task"] = "0:all:raise"
    assert not engine_rewrite.fits(hooked, batch, 1 << 30)


def test_in_the_engine_the_layout_and_rows_are_pylances(tmp_path):
    path = tmp_path / "t.lance"
    degraded_table(str(path), fragments=40)
    before = lance.dataset(str(path))
    expected = pylance_layout(path, tmp_path)
    run = start(str(path))
    assert len(run.pending[0].ids) > 1
    run.execute(InEngine())
    row = dict(zip([n for n, _ in result_columns()], run.result_row()))
    after = lance.dataset(str(path))
    assert layout(after) == expected and content(after) == content(before)
    assert row["commits"] == 1 and row["tasks_failed"] == 0 and row["new_version"] == after.version


def test_a_cancel_stops_before_the_next_task_and_removes_what_finished(tmp_path):
    path = tmp_path / "t.lance"
    degraded_table(str(path), fragments=40)
    before = lance.dataset(str(path))
    files = set(os.listdir(path / "data"))
    run = start(str(path))
    asked = []

    def probe():  # the statement is cancelled once the first task has run
        asked.append(1)
        return "the statement was interrupted" if len(asked) > 2 else None

    with cancellation.serving(probe):
        with pytest.raises(cancellation.Cancelled) as e:
            run.execute(InEngine())
    message = e.value.message
    assert "cancelled during batch 1 (the statement was interrupted)" in message, message
    assert "nothing was committed" in message and "the 1 file of tasks that finished" in message, message
    assert "had not reported" not in message  # the others never started
    assert lance.dataset(str(path)).version == before.version
    assert set(os.listdir(path / "data")) == files


@pytest.mark.parametrize("partial", [False, True])
def test_a_failing_task_fails_as_a_spark_task_would(tmp_path, partial):
    path = tmp_path / "t.lance"
    degraded_table(str(path), fragments=40)
    before = lance.dataset(str(path))
    run = start(str(path), partial_progress=partial, max_commits=1)
    batch = run.pending[0]
    # A data file of the last task is gone: Lance fails that task.
    victim = int(batch.rows[-1][3][0])
    frag = next(f for f in before.get_fragments() if f.fragment_id == victim)
    os.remove(path / "data" / frag.metadata.files[0].path)
    if not partial:
        with pytest.raises(CompactionError) as e:
            run.execute(InEngine())
        # the file is named (file, fragment) and called missing, not a task's bare failure
        assert (f"table db.t: the data file data/{frag.metadata.files[0].path} of fragment {victim} is missing"
                in e.value.message), e.value.message
        assert "nothing was committed" in e.value.message
        assert lance.dataset(str(path)).version == before.version
    else:
        run.execute(InEngine())
        assert run.counts["tasks_failed"] == 1 and run.counts["commits"] == 1
        after = lance.dataset(str(path))
        assert after.version > before.version
        assert victim in {f.fragment_id for f in after.get_fragments()}  # its task was not committed


def test_a_warm_call_in_local_mode_runs_no_rewrite_job(spark, warehouse, tmp_path):
    path = warehouse / "db" / "in_engine.lance"
    degraded_table(str(path), fragments=40)
    before = lance.dataset(str(path))
    expected = pylance_layout(path, tmp_path)
    sc = spark.sparkContext
    # The engine's start (if this is the module's first CALL) starts the Python workers with a
    # job of its own: started and finished before the group is watched.
    spark.sql("CALL lance.plan_compaction(table => 'db.in_engine', target_rows_per_fragment => 300)").collect()
    quiet_since = time.monotonic()
    deadline = quiet_since + 120
    while time.monotonic() - quiet_since < 1.0:
        assert time.monotonic() < deadline, "a Spark job kept running after the engine started"
        if sc.statusTracker().getActiveJobsIds():
            quiet_since = time.monotonic()
        time.sleep(0.05)
    sc.setJobGroup("in-engine", "a small compaction")
    try:
        row = spark.sql("CALL lance.compact(table => 'db.in_engine', target_rows_per_fragment => 300)").collect()[0]
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()  # jobs that run tasks (the cancel watch runs none)
    jobs = [j for j in tracker.getJobIdsForGroup("in-engine") if len(tracker.getJobInfo(j).stageIds) > 0]
    assert jobs == []  # the rewrite ran in the engine, not as a Spark job
    assert row.tasks > 1 and row.commits == 1
    after = lance.dataset(str(path))
    assert layout(after) == expected and content(after) == content(before)


def test_maintain_warehouse_in_local_mode_rewrites_small_tables_without_a_job(spark, warehouse):
    """Each table's small batch of a maintain_warehouse is rewritten in the engine, as a single
    CALL's is: no shared rewrite job runs, and every table is compacted with its rows kept."""
    paths = [warehouse / "engine_wh" / f"t{i}.lance" for i in range(3)]
    for p in paths:
        degraded_table(str(p), fragments=30)
    before = {p: content(lance.dataset(str(p))) for p in paths}
    sc = spark.sparkContext
    spark.sql("CALL lance.plan_compaction(table => 'engine_wh.t0', target_rows_per_fragment => 300)").collect()
    sc.setJobGroup("in-engine-warehouse", "a small warehouse")
    try:
        rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'engine_wh', "
                         "target_rows_per_fragment => 300)").collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    jobs = [j for j in tracker.getJobIdsForGroup("in-engine-warehouse") if len(tracker.getJobInfo(j).stageIds) > 0]
    assert jobs == [], [sc.statusTracker().getJobInfo(j) for j in jobs]  # no shared rewrite job
    compacted = {r.table for r in rows if r.step == "compact" and r.ran and r.error is None}
    assert compacted == {f"engine_wh.t{i}" for i in range(3)}, [tuple(r) for r in rows]
    for p in paths:
        after = lance.dataset(str(p))
        assert content(after) == before[p] and len(after.get_fragments()) < 30
