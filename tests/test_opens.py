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


@pytest.fixture()
def opens(monkeypatch):
    count = {"n": 0}
    real = lance.dataset

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(lance, "dataset", counting)
    return count


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
