"""One place for each rule (compaction/rules.py), without Spark: on real Lance tables, table
health, describe_layout, maintain's reasons, maintain_warehouse's estimate and the planners'
task reasons count the same small fragments and the same fragments over the deletion
threshold, with the target resolved call > table property > catalog setting > default."""
from __future__ import annotations


import lance
import pyarrow as pa
import pytest

from lance_compact.compaction import rules
from lance_compact.compaction.fragments import data_bytes, live_and_deleted
from lance_compact.compaction.planners import get_planner
from lance_compact.maintenance.health import table_health
from lance_compact.maintenance.policy import resolve_policy
from lance_compact.maintenance.table_maintenance import maintain
from lance_compact.maintenance.warehouse_maintenance import _compaction_bytes
from lance_compact.report.layout import layout_result
from lance_compact.runtime.envelope import Envelope


@pytest.fixture()
def table(tmp_path):
    """6 fragments of 100 rows; fragment 0 has 30 deleted (over 0.1), fragment 1 has 5 (not)."""
    uri = str(tmp_path / "r.lance")
    ds = lance.write_dataset(pa.table({"id": list(range(600))}), uri, max_rows_per_file=100)
    ds.delete("id < 30 OR (id >= 100 AND id < 105)")
    return lance.dataset(uri)


def _layout(ds, **params) -> dict:
    result = layout_result(Envelope.parse("layout", {"table": "db.r", "uri": ds.uri, "params": params}))
    return result.records()[0]


def _maintain_reason(ds, **params) -> str:
    rows = maintain(Envelope.parse("maintain", {"table": "db.r", "uri": ds.uri,
                                                "params": {**params, "dry_run": True}}), runner=None)
    return next(r["reason"] for r in rows if r["step"] == "compact")


def test_the_predicates():
    assert rules.is_small(99, 100) and not rules.is_small(100, 100)
    assert rules.over_deletion_threshold(11, 100, 0.1) and not rules.over_deletion_threshold(10, 100, 0.1)
    assert not rules.over_deletion_threshold(0, 0, 0.0)  # an empty fragment has no deleted fraction


@pytest.mark.parametrize("target", [50, 98, 1000])
def test_every_reader_counts_what_the_rules_count(table, target):
    metas = [f.metadata for f in table.get_fragments()]
    th = rules.Thresholds(target, 0.1)
    small = sum(rules.is_small(live_and_deleted(m)[0], target) for m in metas)
    heavy = sum(rules.over_deletion_threshold(live_and_deleted(m)[1], m.physical_rows, 0.1) for m in metas)
    assert heavy == 1

    policy = resolve_policy({"target_rows_per_fragment": target}, table.config(), None, "db.r")
    h = table_health(table, policy)
    assert (h.parts["small_fragments"], h.parts["fragments_over_deletion_threshold"]) == (small, heavy)

    row = _layout(table, target_rows_per_fragment=target)
    assert (row["small_fragments"], row["fragments_over_deletion_threshold"]) == (small, heavy)

    need = rules.compaction_need(metas, th, 16)
    assert _maintain_reason(table, target_rows_per_fragment=target) == need.reason == h.reasons["compact"]
    assert need.reason.startswith("due: ")  # one fragment over the deletion threshold

    assert _compaction_bytes(table, policy) == data_bytes([m for m in metas if th.is_candidate(m)])

    plan = get_planner("default", "db.r").plan(table, {"target_rows_per_fragment": target})
    reasons = " ".join(t.reason for t in plan.tasks)
    assert "materialize deletions in 1 fragment(s) over 0.1 deleted" in reasons


def test_the_target_is_call_then_table_property_then_catalog_then_default(table):
    lance_default = rules.compaction_target({}, {})
    config = {}
    settings = {"maintain.target_rows_per_fragment": "300"}
    assert rules.Thresholds.of_maintenance(config, resolve_policy(None, config, None, "t")).target == lance_default
    assert rules.Thresholds.of_maintenance(config, resolve_policy(None, config, settings, "t")).target == 300
    config = {"lance_compact.maintain.target_rows_per_fragment": "200"}
    assert rules.Thresholds.of_maintenance(config, resolve_policy(None, config, settings, "t")).target == 200
    call = {"target_rows_per_fragment": 100}
    assert rules.Thresholds.of_maintenance(config, resolve_policy(call, config, settings, "t")).target == 100
    # a compaction (and its report) takes what Lance's planner will use: the option, the table's
    # lance.compaction.* setting, Lance's default; and the same for the deletion threshold
    lance_config = {"lance.compaction.target_rows_per_fragment": "70",
                    "lance.compaction.materialize_deletions_threshold": "0.5"}
    assert rules.Thresholds.of_compaction(lance_config, {}) == rules.Thresholds(70, 0.5)
    assert rules.Thresholds.of_compaction(lance_config, {"target_rows_per_fragment": 9,
                                                         "materialize_deletions_threshold": 0.2}) == \
        rules.Thresholds(9, 0.2)
    table.update_config(lance_config)
    row = _layout(lance.dataset(table.uri))
    assert row["target_rows_per_fragment"] == 70 and row["fragments_over_deletion_threshold"] == 0
