"""A table's fragments as columns (compaction/fragment_facts.py), without Spark, on real Lance
tables: every column equals what pylance's public ``FragmentMetadata`` says (the native handles
it reads are pinned to pylance 14.0.2 here), a task read from its JSON equals the task's own
fragments and a result's originals its own, index coverage is the indices' own fragment sets,
the operation read from a transaction file's first bytes is the one pylance decodes, and health, the plan and the layout's figures over a table of many fragments hold no Python
object per fragment."""
from __future__ import annotations

import subprocess
import sys

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.optimize import Compaction

from lance_compact.compaction.fragment_facts import (FragmentFacts, _parsed, data_bytes_of, data_paths, file_path,
                                                     original_facts, task_facts)
from lance_compact.compaction.fragments import data_bytes, index_state, live_and_deleted
from lance_compact.compaction.history import undecodable_rewrite
from lance_compact.compaction.transactions import _from_file, operation_field, operation_kind


@pytest.fixture()
def table(tmp_path):
    """12 fragments of 100 rows, then fragment 3 deleted whole (ids not contiguous), deletions
    in fragments 0 (30 rows), 1 (5 rows) and 7 (1 row), a BTREE over the first 12 and 2 appended
    fragments it does not cover."""
    uri = str(tmp_path / "f.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(1200), pa.int64())}), uri, max_rows_per_file=100)
    ds = lance.dataset(uri)
    ds.delete("(id >= 300 AND id < 400) OR id < 30 OR (id >= 100 AND id < 105) OR id = 777")
    ds.create_scalar_index("id", "BTREE")
    lance.write_dataset(pa.table({"id": pa.array(range(1200, 1400), pa.int64())}), uri, mode="append",
                        max_rows_per_file=100)
    return lance.dataset(uri)


def test_every_column_is_what_the_public_metadata_says(table):
    metas = sorted((f.metadata for f in table.get_fragments()), key=lambda m: m.id)
    facts = FragmentFacts.of(table)
    assert facts.ids.tolist() == [m.id for m in metas]
    assert 3 not in facts.ids.tolist() and len(facts) == 13
    assert facts.physical.tolist() == [m.physical_rows for m in metas]
    assert facts.deleted.tolist() == [live_and_deleted(m)[1] for m in metas]
    assert facts.live.tolist() == [live_and_deleted(m)[0] for m in metas]
    assert [data_bytes_of(table, [m.id]) for m in metas] == [data_bytes([m]) for m in metas]
    assert data_bytes_of(table, [0, 13]) == data_bytes([metas[0], metas[-1]])
    assert facts.bytes == data_bytes(metas) and facts.rows == table.count_rows()
    assert (facts.deleted > 0).sum() == 3
    assert facts.over_threshold(0.1).tolist() == [m.id == 0 for m in metas]  # 30 of 100, not 5 or 1
    assert facts.small(100).sum() == 3
    by_metadata = FragmentFacts.of_metadata(metas)
    assert by_metadata.ids.tolist() == facts.ids.tolist() and by_metadata.bytes == facts.bytes
    assert data_paths(table) == {d.path for m in metas for d in m.files}
    assert all(file_path(d) == d.path and type(file_path(d)) is str for m in metas for d in m.files)
    assert facts.positions([13, 0]).tolist() == [12, 0]
    with pytest.raises(KeyError):
        facts.positions([3])


@pytest.mark.parametrize("options", [{"target_rows_per_fragment": 1000},
                                     {"target_rows_per_fragment": 250, "materialize_deletions_threshold": 0.01},
                                     {"target_rows_per_fragment": 1000, "excluded_fragment_ids": [5, 6]}])
def test_a_task_read_from_its_json_is_the_task(table, options):
    plan = Compaction.plan(table, options)
    assert plan.tasks
    for task in plan.tasks:
        text = task.json()
        got, full = task_facts(text), _parsed(text)
        metas = task.fragments
        assert got.ids.tolist() == full.ids.tolist() == [m.id for m in metas]
        assert got.physical.tolist() == full.physical.tolist() == [m.physical_rows for m in metas]
        assert got.deleted.tolist() == full.deleted.tolist() == [live_and_deleted(m)[1] for m in metas]
        assert got.bytes == full.bytes == data_bytes(metas)
    assert any(task_facts(t.json()).deleted.any() for t in plan.tasks)
    # fragments in another order than their ids (each deletion count is still its fragment's)
    import json
    task = next(t for t in plan.tasks if task_facts(t.json()).deleted.any())
    doc = json.loads(task.json())
    doc["task"]["fragments"].reverse()
    text = json.dumps(doc, separators=(",", ":"))
    got, full = task_facts(text), _parsed(text)
    assert got.ids.tolist() == full.ids.tolist() and got.deleted.tolist() == full.deleted.tolist()
    assert got.physical.tolist() == full.physical.tolist() and got.bytes == full.bytes


def test_a_results_originals_read_from_its_json_are_its_originals(table):
    plan = Compaction.plan(table, {"target_rows_per_fragment": 1000})
    for task in plan.tasks:
        result = task.execute(table)
        got, metas = original_facts(result), result.original_fragments
        assert got.ids.tolist() == [m.id for m in metas] == task_facts(task.json()).ids.tolist()
        assert got.physical.tolist() == [m.physical_rows for m in metas]
        assert got.deleted.tolist() == [live_and_deleted(m)[1] for m in metas]
        assert got.bytes == data_bytes(metas)


def test_index_coverage_is_the_indices_own_fragments(table):
    state = index_state(table)
    (ix,) = [i for i in table.list_indices() if i["name"] == "id_idx"]
    every = {f.fragment_id for f in table.get_fragments()}
    covered = set(ix["fragment_ids"]) & every
    live = {f.fragment_id: live_and_deleted(f.metadata)[0] for f in table.get_fragments()}
    e = state["id_idx"]
    assert e["covered"] == covered and e["unindexed_ids"] == sorted(every - covered) == [12, 13]
    assert e["unindexed"] == 2 and e["unindexed_rows"] == sum(live[i] for i in every - covered) == 200
    assert e["segments"] == 1 and e["type"] == "BTree" and e["fields"] == ["id"]


def test_the_operation_of_every_version_is_pylances(tmp_path):
    """Every operation maintenance meets, committed for real: the kind read from the first
    bytes of its transaction file is the class read_transaction builds (a Rewrite that remapped
    an index, which pylance cannot decode, is a Rewrite), or None where the file is too short
    to hold it."""
    uri = str(tmp_path / "ops.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(300), pa.int64()), "v": [float(i) for i in range(300)]}),
                        uri, max_rows_per_file=100)                                      # Overwrite
    lance.write_dataset(pa.table({"id": pa.array(range(300, 400), pa.int64()), "v": [1.0] * 100}), uri,
                        mode="append")                                                   # Append
    lance.dataset(uri).delete("id = 5")                                                  # Delete
    lance.dataset(uri).create_scalar_index("id", "BTREE")                                # CreateIndex
    lance.dataset(uri).update({"v": "2.0"}, where="id = 7")                              # Update
    lance.dataset(uri).update_config({"lance_compact.x": "y"})                           # UpdateConfig
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)             # reserve, Rewrite
    lance.dataset(uri).add_columns({"w": "id * 2"})                                      # Merge
    ds = lance.dataset(uri)
    kinds = [operation_kind(ds, v) for v in range(1, ds.version + 1)]
    # every name from the manifest file's bytes (the footer's message), none by decoding the manifest
    assert all(_from_file(ds, v) for v in range(1, ds.version + 1))
    expected = []
    for v in range(1, ds.version + 1):
        try:
            expected.append(type(ds.read_transaction(v).operation).__name__)
        except TypeError as e:
            assert undecodable_rewrite(e)
            expected.append("Rewrite")
    assert expected == ["Overwrite", "Append", "Delete", "CreateIndex", "Update", "UpdateConfig",
                        "BaseOperation", "Rewrite", "Merge"]
    # the reservation's file is shorter than the 64 bytes read: unknown, read whole by the caller
    assert kinds == expected[:6] + [None] + expected[7:]
    assert operation_field(b"\x08\x05\x12\x02ab\xa2\x06\x01x") == 100 and operation_field(b"\x08") is None
    # a shallow clone's first version (its transaction names the source: long enough to read)
    clone = ds.shallow_clone(str(tmp_path / "clone.lance"), ds.version)
    assert operation_kind(clone, clone.version) == type(clone.read_transaction(clone.version).operation).__name__
    assert operation_kind(clone, clone.version) == "Clone"


MEASURE = """
import sys, tracemalloc
import lance
from lance_compact.compaction.planners import get_planner
from lance_compact.maintenance.health import table_health
from lance_compact.maintenance.policy import resolve_policy
from lance_compact.report.layout import _fragments
ds = lance.dataset(sys.argv[1])
n = len(ds.fragment_ids())
policy = resolve_policy(None, ds.config() or {}, {}, "db.t", None)
table_health(ds, policy)  # one-off allocations (imports, caches)
out = []
for name, step in [("health", lambda: table_health(ds, policy)),
                   ("plan", lambda: get_planner("default", "db.t").plan(ds, {"target_rows_per_fragment": 1048576})),
                   ("layout", lambda: _fragments(ds)),
                   ("metadata_objects", lambda: [f.metadata for f in ds.get_fragments()])]:
    tracemalloc.start()
    step()
    out.append(f"{name}={tracemalloc.get_traced_memory()[1] / n:.0f}")
    tracemalloc.stop()
print(n, " ".join(out))
"""


def test_many_fragments_cost_no_python_object_each(tmp_path):
    """20,000 fragments of 10 rows (write_fragments and one Append, as issue 45 made them): the
    Python memory health and the plan peak at is a few numpy columns' worth a fragment
    (health 24 bytes kept, plan the task's JSON that a Spark task receives), where the
    public metadata objects take over 1 KB a fragment (measured here: 1,361 bytes)."""
    from lance.fragment import write_fragments

    uri = str(tmp_path / "many.lance")
    rows = 20_000 * 10
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    lance.write_dataset(data, uri)
    # every appended fragment names one data file (only metadata is read): a second to build,
    # where write_fragments of 20,000 files took 90 s on the loaded machine
    one = write_fragments(data, uri, max_rows_per_file=10, schema=data.schema)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(one * 19_999), read_version=1)
    p = subprocess.run([sys.executable, "-c", MEASURE, uri], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    n, *pairs = p.stdout.split()
    per = {k: int(v) for k, v in (x.split("=") for x in pairs)}
    assert int(n) == 20_000
    assert per["health"] < 120, per  # columns and their temporaries
    assert per["layout"] < 200, per  # the row's lists of live and deleted rows are its output
    assert per["plan"] < 600, per  # the task's JSON (~230 bytes a fragment) and its ids
    assert per["metadata_objects"] > 4 * per["health"], per  # what it replaced
    facts = FragmentFacts.of(lance.dataset(uri))
    assert facts.rows == rows and np.all(facts.physical == 10)


BUDGETED = """
import sys, tracemalloc
import lance
from lance_compact.compaction.planners import get_planner
ds = lance.dataset(sys.argv[1])
out = []
for name, options in [("budget", {"target_rows_per_fragment": 1000, "max_source_fragments": 2000}),
                      ("whole", {"target_rows_per_fragment": 1000})]:
    get_planner("default", "db.t").plan(ds, options)  # one-off allocations (imports, caches)
    tracemalloc.start()
    plan = get_planner("default", "db.t").plan(ds, options)
    out.append(f"{name}={tracemalloc.get_traced_memory()[1]}:{sum(len(t.fragment_ids) for t in plan.tasks)}")
    tracemalloc.stop()
    del plan
print(len(ds.fragment_ids()), " ".join(out))
"""


def test_a_budgeted_plan_of_many_fragments_holds_memory_of_its_budget(tmp_path):
    """The bounded path for a huge table (issue 45): a plan cut by a budget
    (``max_source_fragments``, tasks of 100 fragments) holds Python memory for the fragments
    it takes, whatever the table's size: on 50,001 fragments, 2,000 planned take under 2 MB
    where the whole plan's task JSON takes over 10 MB. The table's fragments all name one data
    file (Lance's metadata paths only are read; built in about a second, where
    ``write_fragments`` of 50,000 files takes a minute on the loaded machine)."""
    from lance.fragment import write_fragments

    uri = str(tmp_path / "budget.lance")
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    lance.write_dataset(data, uri)
    one = write_fragments(data, uri, max_rows_per_file=10, schema=data.schema)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(one * 50_000), read_version=1)
    p = subprocess.run([sys.executable, "-c", BUDGETED, uri], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    n, *pairs = p.stdout.split()
    got = {k: tuple(map(int, v.split(":"))) for k, v in (x.split("=") for x in pairs)}
    assert int(n) == 50_001
    (budget_peak, budget_fragments), (whole_peak, whole_fragments) = got["budget"], got["whole"]
    assert budget_fragments == 2000 and whole_fragments == 50_001, got
    assert budget_peak < 2_000_000, got
    assert whole_peak > 10_000_000 and whole_peak > 10 * budget_peak, got
