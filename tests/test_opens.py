"""One open of a table per step, without Spark: maintain reads the table once for its
decisions (a step that committed is followed by a fresh open), and a commit that meets a
concurrent writer reads the latest and the plan's version through the run's own dataset
(Lance's checkout_version) instead of opening the table again -- rows neither lost nor
resurrected."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from lance.optimize import Compaction

from lance_compact.compaction.commit import commit_results
from lance_compact.compaction.request import CompactionRequest
from lance_compact.maintenance.table_maintenance import maintain
from lance_compact.runtime.envelope import Envelope

pytestmark = pytest.mark.usefixtures("no_version_floor")  # cleanups of versions seconds old


def test_maintain_opens_the_table_once_per_change(tmp_path, opens):
    uri = str(tmp_path / "m.lance")
    ds = lance.write_dataset(pa.table({"x": list(range(100))}), uri, max_rows_per_file=50)
    ds.create_scalar_index("x", "BTREE")
    lance.write_dataset(pa.table({"x": [1]}), uri, mode="append")
    params = {"min_small_fragments": 1000, "older_than": "0 seconds"}
    request = lambda dry: Envelope.parse("maintain", {"table": "db.m", "uri": uri,  # noqa: E731
                                                      "params": {**params, "dry_run": dry}})
    opens["n"] = 0
    rows = maintain(request(True), runner=None)
    assert [r["reason"].split(":")[0] for r in rows] == ["not due (fewer than 1000 small fragments and none over "
                                                          "the deletion threshold)", "due", "due"]
    assert opens["n"] == 1  # was 4: the policy, then each step, opened the table again
    opens["n"] = 0
    rows = maintain(request(False), runner=None)
    assert [r["step"] for r in rows if r["ran"]] == ["optimize_indices", "cleanup"]
    # one for the policy and compaction's decision (reused by optimize_indices, which moves it
    # to its commit), one for cleanup's decision after that commit, one inside cleanup
    assert opens["n"] == 3  # was 7
    assert lance.dataset(uri).count_rows() == 101


def test_a_conflicting_commit_reads_through_the_runs_dataset(tmp_path, opens):
    uri = str(tmp_path / "c.lance")
    lance.write_dataset(pa.table({"x": list(range(400))}), uri, max_rows_per_file=50)
    ds = lance.dataset(uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 1000})
    results = [t.execute(ds) for t in plan.tasks]
    lance.dataset(uri).delete("x < 10")  # another writer deletes rows of the compacted fragments
    opens["n"] = 0
    request = CompactionRequest(table="db.c", uri=uri, options={"target_rows_per_fragment": 1000})
    outcome = commit_results(request, plan.read_version, results, ds)
    assert opens["n"] == 0  # was 4: the latest and the plan's version, twice each
    assert (outcome.commits, outcome.rebased, outcome.conflicted) == (1, len(results), [])
    after = lance.dataset(uri)
    assert after.count_rows() == 390 and after.count_rows("x < 10") == 0  # the delete is kept
    assert len(after.get_fragments()) == 1


def test_a_dry_run_opens_the_table_once(tmp_path, opens):
    """plan_compaction (and compact, the same path) reads the clustering's record and plans
    on one open of the table (was 2)."""
    from lance_compact.compaction.orchestrate import dry_run
    from lance_compact.compaction.request import CompactionRequest

    uri = str(tmp_path / "p.lance")
    lance.write_dataset(pa.table({"x": list(range(100))}), uri, max_rows_per_file=10)
    request = CompactionRequest.of(Envelope.parse("plan", {"table": "db.p", "uri": uri,
                                                           "params": {"target_rows_per_fragment": 50}}))
    opens["n"] = 0
    rows = dry_run(request)
    assert opens["n"] == 1
    assert [r[4] for r in rows] == [5, 5]  # two tasks of 5 fragments each


def _in_this_process(tasks: list):
    """maintain_warehouse's packed rewrite jobs, run here: each task by the code a Spark
    executor runs (execute_task, one open each, counted in ``tasks``), so the driver's opens
    are counted without Spark."""
    from lance_compact.compaction.execute import execute_task

    def run_packed(entries):
        out = [([execute_task(r.table, r.uri, dict(r.storage_options), tid, tj)
                 for tid, tj in zip(b.ids, b.tasks)], None, False) for r, b, _ in entries]
        tasks.extend(o for done, _, _ in out for o in done)
        return out
    return run_packed


def test_maintain_warehouse_opens_each_table_once_per_change(tmp_path, opens):
    from oracle import batch, degraded_table
    from lance_compact.maintenance.warehouse_maintenance import maintain_warehouse_rows

    tables = []
    for i in range(3):
        uri = str(tmp_path / "ns" / f"t{i}.lance")
        ds = degraded_table(uri, fragments=12, rows_per_fragment=20, seed=i)
        if i == 0:
            ds.create_scalar_index("id", "BTREE")
            lance.write_dataset(batch(10_000, 20), uri, mode="append")
        tables.append({"namespace": "ns", "table": f"t{i}", "uri": uri})
    before = {f"ns.{t['table']}": lance.dataset(t["uri"]).to_table().sort_by("id") for t in tables}
    request = Envelope.parse("maintain_warehouse", {"tables": tables, "params": {"older_than": "0 seconds"}})
    opens["n"] = 0
    tasks: list = []
    rows = maintain_warehouse_rows(request, _in_this_process(tasks))
    ran = {(r[0], r[1]) for r in rows if r[2]}
    assert {t for t, _ in ran} == set(before) and ("ns.t0", "optimize_indices") in ran
    # the driver's, per table: the evaluation's (reused by compaction's decision), one in
    # compaction's run (orchestrate.py: the table's clustering and its plan), the open after its
    # commit (reused by optimize_indices, cleanup's decision and the health after), cleanup's
    assert tasks and opens["n"] - len(tasks) == 4 * len(tables), opens["n"]  # was 8 per table
    for t in tables:
        after = lance.dataset(t["uri"])
        assert after.to_table().sort_by("id").equals(before[f"ns.{t['table']}"])  # no row lost or made
        assert len(after.versions()) == 1 and len(after.get_fragments()) <= 2  # compacted, cleaned up


def test_a_warehouse_dry_run_reads_no_old_manifest(tmp_path, monkeypatch):
    """maintain_warehouse's evaluation counts versions from one listing of _versions/: no
    ``versions()`` (every manifest), and for tables written within the policy's older_than only
    the oldest old version's manifest is read (version_ages.py); with older_than '0 seconds' none."""
    from oracle import degraded_table
    from lance_compact.maintenance.warehouse_maintenance import maintain_warehouse_rows

    reads = {"versions": 0, "checkout": 0}
    versions, checkout = lance.LanceDataset.versions, lance.LanceDataset.checkout_version

    def counting_versions(self):
        reads["versions"] += 1
        return versions(self)

    def counting_checkout(self, version):
        reads["checkout"] += 1
        return checkout(self, version)
    monkeypatch.setattr(lance.LanceDataset, "versions", counting_versions)
    monkeypatch.setattr(lance.LanceDataset, "checkout_version", counting_checkout)
    tables = []
    for i in range(3):
        uri = str(tmp_path / "ns" / f"t{i}.lance")
        degraded_table(uri, fragments=12, rows_per_fragment=20, seed=i)
        tables.append({"namespace": "ns", "table": f"t{i}", "uri": uri})
    for older_than, most in (("7 days", 1), ("0 seconds", 0)):
        reads.update(versions=0, checkout=0)
        request = Envelope.parse("maintain_warehouse", {"tables": tables, "params": {
            "dry_run": True, "older_than": older_than}})
        rows = maintain_warehouse_rows(request, lambda entries: [])
        cleanup = [r for r in rows if r[1] == "cleanup"]
        assert len(cleanup) == 3
        due = "not due" if older_than == "7 days" else "due"
        assert all(r[3].startswith(due) for r in cleanup), cleanup
        assert reads["versions"] == 0 and reads["checkout"] <= most * len(tables), (older_than, reads)
