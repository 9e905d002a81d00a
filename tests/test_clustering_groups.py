"""Incremental clustering runs with several independent groups (issue 26, after the first
cut): each component of overlapping key ranges is its own Rewrite group, all of them sampled
in one Spark job and sorted+written in one; without partial progress they commit in one
Rewrite (one version), a group a concurrent delete touched re-runs alone (or is reported
conflicted) while the others commit; with ``partial_progress`` a group whose task fails its
last attempt is counted in ``tasks_failed`` and the others land. After every run: every row
once with exact values, the record names exactly the fragments clustered. Real Spark
(local[2]), real Lance tables; one session."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_compact.compaction.clustering.state import ClusteringState
from test_clustering import rows

BANDS = (100_000, 500_000, 900_000)  # ts of the appended fragments: one narrow band each


class _Meta:
    """The fragment metadata select_incremental reads: id, live rows, data files' sizes."""

    def __init__(self, fid: int, rows: int) -> None:
        self.id, self.num_rows = fid, rows

    def data_files(self) -> list:
        return []


def test_each_component_is_its_own_group_and_budgets_cut_them():
    from lance_compact.compaction.clustering.plan import select_incremental
    metas = [_Meta(f, 250 if f == 6 else 100) for f in range(1, 8)]  # fresh rows outweigh the layers they overlap
    known = {1: (0, 9), 2: (10, 19), 3: (20, 29), 4: (30, 39)}  # clustered, disjoint
    fresh = {5: (2, 4), 6: (22, 31), 7: (50, 60)}  # 5 overlaps 1; 6 overlaps 3 and 4; 7 nothing
    groups, left = select_incremental(metas, known, fresh, {})
    assert sorted(groups) == [[1, 5], [3, 4, 6], [7]] and left == 0
    assert groups[0] == [3, 4, 6]  # deepest first
    groups, left = select_incremental(metas, known, fresh, {"max_source_fragments": 4})
    assert groups == [[3, 4, 6], [5]] and left == 2  # the next group only in part: its fresh fragment first


def test_partial_progress_splits_groups_into_at_most_max_commits_commits():
    from lance_compact.compaction.clustering.run import _batches
    from lance_compact.compaction.request import CompactionRequest
    done = list(range(5))
    run = lambda **kw: CompactionRequest("db.t", "/x", run={"partial_progress": False, "max_commits": 10, **kw})
    assert _batches(done, run()) == [done]  # one Rewrite of every group
    assert _batches(done, run(partial_progress=True, max_commits=2)) == [[0, 1], [2, 3, 4]]
    assert _batches(done, run(partial_progress=True)) == [[0], [1], [2], [3], [4]]
    assert _batches([], run(partial_progress=True)) == []


def layout_of(uri: str) -> tuple[set[int], ClusteringState]:
    ds = lance.dataset(uri)
    state = ClusteringState.from_config(ds.config())
    assert state is not None
    return {f.fragment_id for f in ds.get_fragments()}, state


def content(uri: str) -> pa.Table:
    return lance.dataset(uri).to_table().sort_by("id")


def banded(start: int, band: int, seed: int, n: int = 800) -> pa.Table:
    t = rows(start, n, seed)
    return t.set_column(2, "ts", pa.array(band + np.random.default_rng(seed).integers(0, 500, n)))


def make_clustered(spark, warehouse, name: str) -> str:
    """6 fragments clustered by ts (about 7 fragments of 360 rows), then three appended
    fragments whose ts fall in three narrow, far-apart bands: three independent components;
    each appended fragment outweighs the clustered ones its band overlaps, so the size-tiered
    choice (plan.tiered) merges them: each group is an appended fragment and 1-2 clustered ones."""
    uri = str(warehouse / "grp" / f"{name}.lance")
    for i in range(6):
        lance.write_dataset(rows(i * 400, 400, 300 + i), uri, mode="append" if i else "create")
    spark.sql(f"ALTER TABLE lance.grp.{name} CLUSTER BY (ts)")
    r, jobs = jobs_of(spark, f"first-{name}", f"CALL lance.compact(table => 'grp.{name}', "
                      "target_rows_per_fragment => 400)")
    assert r.fragments_removed == 6 and r.commits == 2
    assert jobs == 2, jobs  # a first clustering is one group: one sampling job, one sort+write job
    for k, band in enumerate(BANDS):
        lance.write_dataset(banded(100_000 + 1_000 * k, band, 400 + k), uri, mode="append")
    return uri


def plan(spark, name: str, args: str = "") -> list:
    return spark.sql(f"CALL lance.plan_compaction(table => 'grp.{name}', target_rows_per_fragment => 400{args})"
                     ).collect()


def compact(spark, name: str, args: str = ""):
    return spark.sql(f"CALL lance.compact(table => 'grp.{name}', target_rows_per_fragment => 400{args})").collect()[0]


def jobs_of(spark, group: str, sql: str):
    """The result of ``sql`` and how many Spark jobs it ran (under a job group of its own)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, "count the jobs of a clustering run", interruptOnCancel=False)
    try:
        row = spark.sql(sql).collect()[0]
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    jobs = [j for j in tracker.getJobIdsForGroup(group)  # that run tasks: the cancel watch runs none
            if len(tracker.getJobInfo(j).stageIds) > 0]
    return row, len(jobs)


def test_independent_components_are_groups_of_one_rewrite_in_two_jobs(spark, warehouse):
    uri = make_clustered(spark, warehouse, "three")
    before = content(uri)
    groups = plan(spark, "three")
    assert len(groups) == 3, groups
    assert all("one of 3 independent groups" in g.reason for g in groups)
    appended = set(sorted(layout_of(uri)[0])[-3:])
    for g in groups:  # each group: one appended fragment and the clustered ones its band overlaps
        assert len(set(g.fragment_ids) & appended) == 1 and 2 <= g.fragments <= 3, g
    version = lance.dataset(uri).version

    r, jobs = jobs_of(spark, "three", "CALL lance.compact(table => 'grp.three', target_rows_per_fragment => 400)")
    assert r.commits == 2 and r.new_version == version + 2  # one Rewrite of the 3 groups, then the record
    assert r.fragments_removed == sum(g.fragments for g in groups) and r.tasks_failed == 0
    ds = lance.dataset(uri)
    rewrite = next(t for t in ds.get_transactions(2) if t.operation.__class__.__name__ == "Rewrite")
    assert len(rewrite.operation.groups) == 3
    assert sorted(sorted(f.id for f in g.old_fragments) for g in rewrite.operation.groups) == \
        sorted(sorted(g.fragment_ids) for g in groups)
    assert content(uri).equals(before)
    present, state = layout_of(uri)
    assert set(state.ranges) == present  # the record names exactly the table's fragments
    # The key-range job, one sampling job and one sort+write job, whatever the number of groups.
    assert jobs == 3, jobs
    assert plan(spark, "three")[0].fragments == 0  # nothing left to do


def fail_group_table(spark, warehouse, name: str):
    uri = make_clustered(spark, warehouse, name)
    groups = plan(spark, name)
    assert len(groups) == 3
    return uri, groups


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_partial_progress_commits_the_groups_whose_tasks_finished(spark, warehouse, mode):
    """Group 1's sort+write task fails its only attempt (raises, or its Python worker dies):
    with partial progress groups 0 and 2 commit (in two commits, max_commits 3), group 1 is
    counted in tasks_failed and stays as it was; the record names exactly the clustered
    fragments; the next run clusters group 1."""
    name = f"pp_{mode}"
    uri, groups = fail_group_table(spark, warehouse, name)
    before = content(uri)
    appended = set(sorted(layout_of(uri)[0])[-3:])
    r = compact(spark, name, ", partial_progress => true, max_commits => 3, "
                f"options => map('test_fail_task', '1:all:{mode}')")
    assert r.tasks_failed == 1 and r.commits == 4, r  # 2 groups x (Rewrite + record)
    assert r.fragments_removed == groups[0].fragments + groups[2].fragments
    assert content(uri).equals(before)
    present, state = layout_of(uri)
    failed = set(groups[1].fragment_ids)
    assert failed <= present  # the failed group is as it was
    assert set(state.ranges) == present - (failed & appended)  # its appended fragment is still unclustered
    again = plan(spark, name)
    assert len(again) == 1 and sorted(again[0].fragment_ids) == sorted(failed)
    r = compact(spark, name)
    assert r.tasks_failed == 0 and r.fragments_removed == len(failed) and r.commits == 2
    assert content(uri).equals(before)
    present, state = layout_of(uri)
    assert set(state.ranges) == present


def test_without_partial_progress_a_failed_group_fails_the_run(spark, warehouse):
    uri, _ = fail_group_table(spark, warehouse, "all_or_nothing")
    before, version = content(uri), lance.dataset(uri).version
    files = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    with pytest.raises(Exception, match="nothing was committed"):
        compact(spark, "all_or_nothing", ", options => map('test_fail_task', '1:all:raise')")
    assert lance.dataset(uri).version == version and content(uri).equals(before)
    assert {f.fragment_id for f in lance.dataset(uri).get_fragments()} == files


DELETED = 3


def delete_in_newest_fragment(uri, storage_options):
    """Before the first commit only: delete a few rows of the newest fragment (an appended
    one, so one group's source)."""
    from writers import _once
    if not _once(uri, "delete_newest"):
        return
    ds = lance.dataset(uri, storage_options=storage_options)
    newest = max(f.fragment_id for f in ds.get_fragments())
    ids = ds.get_fragment(newest).to_table(columns=["id"])["id"].to_pylist()[:DELETED]
    ds.delete(f"id IN ({', '.join(map(str, ids))})")


@pytest.mark.parametrize("retries", [0, 3])
def test_a_concurrent_delete_on_one_group_reruns_that_group_only(spark, warehouse, retries):
    """The delete lands between the rewrite and the commit, in one group's fragment: Lance
    refuses the Rewrite of all groups; the two untouched groups commit, the touched one runs
    again at the new version (max_retries 3) or is reported conflicted (max_retries 0). The
    delete is kept: no deleted row comes back."""
    name = f"conc_{retries}"
    uri = make_clustered(spark, warehouse, name)
    groups = plan(spark, name)
    newest = max(layout_of(uri)[0])
    touched = next(g for g in groups if newest in g.fragment_ids)
    others = [g for g in groups if g is not touched]
    before = content(uri)
    gone = pa.array(lance.dataset(uri).get_fragment(newest).to_table(columns=["id"])["id"].to_pylist()[:DELETED])
    r = compact(spark, name, f", max_retries => {retries}, "
                "options => map('test_before_commit', 'test_clustering_groups.delete_in_newest_fragment')")
    assert "preempted by concurrent transaction Delete" in r.conflicts, r
    expected = before.filter(pc.invert(pc.is_in(before["id"], gone)))
    assert content(uri).equals(expected)  # the delete kept, every other row once
    present, state = layout_of(uri)
    if retries == 0:
        assert r.tasks_conflicted == 1 and r.retries == 0 and r.commits == 2, r
        assert r.fragments_removed == sum(g.fragments for g in others)
        assert set(touched.fragment_ids) <= present
        assert newest not in state.ranges and set(state.ranges) == present - {newest}
    else:
        assert r.tasks_conflicted == 0 and r.retries == 1 and r.commits == 4, r
        assert r.fragments_removed == sum(g.fragments for g in groups)
        assert set(state.ranges) == present
    assert plan(spark, name)[0].fragments == (len(touched.fragment_ids) if retries == 0 else 0)


def test_two_clustering_runs_at_once_leave_an_exact_record(spark, warehouse):
    """Two CALLs on one table at the same moment (both write, then wait 3 s before their
    commit): one commits, the other's Rewrite is refused and it runs again at the new version
    (or finds nothing left to do). Every row once with exact values; the record names every
    fragment of the table and no other."""
    import threading
    uri = make_clustered(spark, warehouse, "twice")
    before = content(uri)
    sql = ("CALL lance.compact(table => 'grp.twice', target_rows_per_fragment => 400, "
           "options => map('test_before_commit', 'writers.slow_commit'))")
    results, errors = [], []

    def run() -> None:
        try:
            results.append(spark.sql(sql).collect()[0])
        except Exception as e:  # asserted below: there must be none
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(results) == 2
    assert sorted(r.retries for r in results)[1] >= 1 or min(r.fragments_removed for r in results) == 0, results
    assert content(uri).equals(before)
    present, state = layout_of(uri)
    assert set(state.ranges) == present
    assert plan(spark, "twice")[0].fragments == 0
