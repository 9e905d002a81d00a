"""Maintenance policies and table health without Spark: real Lance tables on disk, the
engine's functions called as the engine calls them."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import lance
import pyarrow as pa
import pytest

from lance_compact.errors import CompactionError
from lance_compact.maintenance.health import table_health
from lance_compact.maintenance.table_maintenance import maintain
from lance_compact.maintenance.policy import PROPERTY_PREFIX, resolve_policy
from lance_compact.catalog import table_properties
from lance_compact.runtime.envelope import Envelope, Result

# older_than '3 days' and '0 seconds' below: the version floor off, as an operator may set it
pytestmark = pytest.mark.usefixtures("no_version_floor")


def alter_properties(request_json: str):
    """The engine's alter_properties, its request parsed as the engine parses it."""
    result = table_properties.alter_properties(Envelope.parse("alter_properties", request_json))
    return result.schema, result.rows


def maintain_rows(request_json: str, runner):
    """The engine's maintain: its rows in maintain_columns order."""
    return Result.of("maintain_columns", maintain(Envelope.parse("maintain", request_json), runner)).json_rows()


def _write(uri: str, fragments: int, rows: int = 50, delete: str | None = None, index: bool = False,
           appends: int = 0) -> lance.LanceDataset:
    for i in range(fragments):
        data = pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})
        lance.write_dataset(data, uri, mode="append" if i else "create")
    ds = lance.dataset(uri)
    if delete:
        ds.delete(delete)
    if index:
        lance.dataset(uri).create_scalar_index("id", "BTREE")
    for j in range(appends):
        lance.write_dataset(pa.table({"id": pa.array([10**6 + j], pa.int64())}), uri, mode="append")
    return lance.dataset(uri)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    return {
        "healthy": _write(str(root / "healthy.lance"), 1, rows=200),
        "degraded": _write(str(root / "degraded.lance"), 20, delete="id % 3 = 0"),
        "indexed": _write(str(root / "indexed.lance"), 2, rows=100, index=True, appends=3),
    }


def test_precedence_call_then_table_then_catalog_then_default():
    config = {PROPERTY_PREFIX + "min_small_fragments": "5", PROPERTY_PREFIX + "priority": "7",
              "lance.compaction.target_rows_per_fragment": "1000"}
    catalog = {"maintain.min_small_fragments": "9", "maintain.older_than": "3 days", "min_unindexed_fragments": "4"}
    p = resolve_policy({"min_small_fragments": 2, "dry_run": True}, config, catalog, "db.t", "lance")
    assert (p.get("min_small_fragments"), p.source("min_small_fragments")) == (2, "call")
    assert (p.priority, p.source("priority")) == (7, "table")
    assert (p.get("target_rows_per_fragment"), p.source("target_rows_per_fragment")) == (1000, "table")
    assert (p.get("older_than"), p.source("older_than")) == ("3 days", "catalog")
    assert (p.get("min_unindexed_fragments"), p.source("min_unindexed_fragments")) == (4, "catalog")
    assert (p.enabled, p.source("enabled")) == (True, "default")
    assert p.get("retain_versions") is None and p.source("retain_versions") is None
    p = resolve_policy(None, {}, catalog, "db.t")
    assert (p.get("min_small_fragments"), p.source("min_small_fragments")) == (9, "catalog")
    assert (p.get("target_rows_per_fragment"), p.source("target_rows_per_fragment")) == (1048576, "default")
    p = resolve_policy(None, None, None, "db.t")
    assert p.get("min_small_fragments") == 16 and p.get("older_than") == "7 days" and p.priority == 0
    # ours beats Lance's own key; a table property beats the catalog
    p = resolve_policy(None, {**config, PROPERTY_PREFIX + "target_rows_per_fragment": "10"},
                       {"target_rows_per_fragment": "99"}, "db.t")
    assert p.get("target_rows_per_fragment") == 10


@pytest.mark.parametrize("args,config,catalog,message", [
    (None, {PROPERTY_PREFIX + "min_small_fragments": "x"}, None,
     "table db.t: table property lance_compact.maintain.min_small_fragments expects an integer, got 'x'"),
    (None, None, {"maintain.enabled": "perhaps"},
     "table db.t: catalog setting spark.sql.catalog.lance.maintain.enabled expects true or false, got 'perhaps'"),
    ({"priority": "high"}, None, None, "table db.t: parameter priority expects an integer, got 'high'"),
    (None, {PROPERTY_PREFIX + "older_than": "soon"}, None,
     "table db.t: table property lance_compact.maintain.older_than expects '<n> days"),
    (None, {PROPERTY_PREFIX + "bogus": "1"}, None,
     "table db.t: unknown table property lance_compact.maintain.bogus; valid keys are: lance_compact.maintain.enabled"),
    (None, None, {"maintain.bogus": "1"},
     "unknown catalog setting spark.sql.catalog.lance.maintain.bogus; valid keys are: spark.sql.catalog.lance.maintain.enabled"),
])
def test_bad_policy_values_name_table_key_and_source(args, config, catalog, message):
    with pytest.raises(CompactionError) as e:
        resolve_policy(args, config, catalog, "db.t", "lance")
    assert message in e.value.message


def _maintain_due(ds, **params) -> list[str]:
    """The steps CALL lance.maintain would run (its dry run, as the engine serves it)."""
    request = {"table": "db.t", "uri": ds.uri, "params": {**params, "dry_run": True}}
    rows = maintain_rows(json.dumps(request), runner=None)
    return [r[1] for r in rows if r[2] is False and r[3].startswith("due")]


@pytest.mark.parametrize("params", [{}, {"min_small_fragments": 2, "older_than": "0 seconds"},
                                    {"target_rows_per_fragment": 40, "min_unindexed_fragments": 4}])
def test_due_steps_are_maintains(tables, params):
    for name, ds in tables.items():
        h = table_health(ds, resolve_policy(params, ds.config(), None, name))
        assert list(h.due) == _maintain_due(ds, **params), name
        assert (h.score == 100) == (not h.due)
        for step in ("compact", "optimize_indices", "cleanup"):
            assert h.reasons[step].startswith("due" if step in h.due else "not due")


def test_health_parts_and_ordering(tables):
    policy = lambda ds: resolve_policy(None, ds.config(), None, "t")  # noqa: E731
    healthy, degraded, indexed = (table_health(tables[n], policy(tables[n]))
                                  for n in ("healthy", "degraded", "indexed"))
    assert healthy.score == 100 and healthy.due == []
    assert degraded.due == ["compact"] and indexed.due == ["optimize_indices"]
    assert degraded.score < indexed.score < healthy.score
    p = degraded.parts
    assert (p["fragments"], p["small_fragments"], p["small_fragment_ratio"]) == (20, 20, 1.0)
    assert p["deleted_rows"] == 334 and p["deleted_row_ratio"] == pytest.approx(334 / 1000)
    assert p["fragments_over_deletion_threshold"] == 20 and p["unindexed_fragments"] == 0
    assert p["versions"] == 21 and p["reclaimable_versions"] == 0 and p["reclaimable_bytes"] is None
    assert p["hours_since_compaction"] is None and p["last_compacted_version"] is None
    assert indexed.parts["indices"] == {"id_idx": {"type": "BTree", "unindexed_fragments": 3, "unindexed_rows": 3,
                                                   "segments": 1}}
    assert (indexed.parts["unindexed_fragments"], indexed.parts["unindexed_rows"], indexed.parts["index_segments"]) == \
        (3, 3, 1)
    # Eight days on, every old version is reclaimable: cleanup is due and costs points.
    later = table_health(tables["degraded"], policy(tables["degraded"]),
                         now=datetime.now(timezone.utc) + timedelta(days=8))
    assert later.due == ["compact", "cleanup"] and later.parts["reclaimable_versions"] == 20
    assert later.score < degraded.score
    kept = table_health(tables["degraded"], resolve_policy({"retain_versions": 15}, {}, None, "t"),
                        now=datetime.now(timezone.utc) + timedelta(days=8))
    assert kept.parts["reclaimable_versions"] == 6


def test_compaction_shows_in_hours_since_compaction(tmp_path):
    ds = _write(str(tmp_path / "c.lance"), 3)
    ds.optimize.compact_files()  # versions 4 (reserve fragment ids) and 5 (the Rewrite)
    h = table_health(lance.dataset(ds.uri), resolve_policy(None, {}, None, "t"))
    assert h.parts["last_compacted_version"] == 5 and 0 <= h.parts["hours_since_compaction"] < 0.1


def test_alter_properties_validates_then_writes_one_commit(tmp_path):
    ds = _write(str(tmp_path / "p.lance"), 1)
    request = lambda **kw: json.dumps({"table": "db.p", "uri": ds.uri, **kw})  # noqa: E731
    _, rows = alter_properties(request(set={"lance_compact.maintain.enabled": "FALSE",
                                            "lance.compaction.target_rows_per_fragment": "500"}))
    assert rows == [("lance.compaction.target_rows_per_fragment", "500"), ("lance_compact.maintain.enabled", "false")]
    version = lance.dataset(ds.uri).version
    assert version == ds.version + 1
    for bad, text in [({"set": {"spark.foo": "1"}}, "cannot set table property 'spark.foo'"),
                      ({"set": {"lance.compaction.target_rows_per_fragment": "0"}}, "must be >= 1"),
                      ({"set": {"lance_compact.maintain.priority": "1", "lance_compact.maintain.enabled": "x"}},
                       "table property lance_compact.maintain.enabled expects true or false"),
                      ({"set": {"lance.compaction.num_threads": "2"}},  # Lance does not read it
                       "cannot set table property 'lance.compaction.num_threads'"),
                      ({"set": {"lance.compaction.compaction_mode": "fast"}},
                       "table property lance.compaction.compaction_mode must be one of reencode"),
                      ({"unset": ["lance.auto_cleanup.interval"]}, "cannot unset")]:
        with pytest.raises(CompactionError) as e:
            alter_properties(request(**bad))
        assert text in e.value.message
        if "cannot" in text:  # a refused key: the message lists the valid ones
            assert "valid keys are: lance_compact.maintain.enabled" in e.value.message
        assert lance.dataset(ds.uri).version == version
    _, rows = alter_properties(request(unset=["lance_compact.maintain.enabled", "lance_compact.maintain.priority"]))
    assert rows == [("lance.compaction.target_rows_per_fragment", "500")]
    assert lance.dataset(ds.uri).version == version + 1


def test_lance_compaction_values_are_asked_of_lance_before_they_are_written(tmp_path):
    """A lance.compaction.* value Lance cannot use (an unknown data_storage_version, a V1
    version on a V2 table) is refused naming the key and Lance's reason; nothing is written."""
    ds = _write(str(tmp_path / "v.lance"), 3)
    request = lambda **kw: json.dumps({"table": "db.v", "uri": ds.uri, **kw})  # noqa: E731
    for value, reason in [("garbage!!", "Unknown Lance storage version"), ("legacy", "cannot be mixed")]:
        with pytest.raises(CompactionError) as e:
            alter_properties(request(set={"lance.compaction.data_storage_version": value}))
        assert f"table property lance.compaction.data_storage_version = '{value}' is not a value Lance can use" \
            in e.value.message and reason in e.value.message and "nothing was changed" in e.value.message
        assert lance.dataset(ds.uri).version == ds.version
    for bad, text in [({"lance_compact.maintain.older_than": "soon"}, "lance_compact.maintain.older_than"),
                      ({"lance_compact.maintain.priority": "1.5"}, "expects an integer")]:
        with pytest.raises(CompactionError, match=text):
            alter_properties(request(set=bad))
        assert lance.dataset(ds.uri).version == ds.version
    _, rows = alter_properties(request(set={"lance.compaction.data_storage_version": "2.1"}))
    assert rows == [("lance.compaction.data_storage_version", "2.1")]
    lance.dataset(ds.uri).optimize.compact_files()  # Lance can use what was stored


def test_a_bad_value_written_by_another_tool_is_named_with_its_fix(tmp_path):
    """pylance itself stores anything: compaction then fails naming the property and how to
    remove it (not as a bug); changing another key is refused until it is removed; setting
    that key to a good value, or unsetting it, is accepted."""
    from lance_compact.engine import handle
    from lance_compact.compaction.orchestrate import dry_run
    from lance_compact.compaction.request import CompactionRequest

    ds = _write(str(tmp_path / "b.lance"), 3)
    ds.update_config({"lance.compaction.data_storage_version": "garbage!!"})
    bad_version = lance.dataset(ds.uri).version
    request = lambda **kw: json.dumps({"table": "db.b", "uri": ds.uri, **kw})  # noqa: E731
    answer = handle({"plan": lambda r: Result("x STRING", dry_run(CompactionRequest.of(r)))}, "plan", request())
    assert not answer["ok"]
    assert "the table property lance.compaction.data_storage_version holds a value Lance cannot use " \
           "('garbage!!')" in answer["error"]
    assert "UNSET TBLPROPERTIES ('lance.compaction.data_storage_version')" in answer["error"]
    assert "bug" not in answer["error"]
    with pytest.raises(CompactionError) as e:
        alter_properties(request(set={"lance.compaction.target_rows_per_fragment": "100"}))
    assert "already holds a value Lance cannot use" in e.value.message
    assert "ALTER TABLE db.b UNSET TBLPROPERTIES ('lance.compaction.data_storage_version')" in e.value.message
    assert lance.dataset(ds.uri).version == bad_version
    with pytest.raises(CompactionError, match="is not a value Lance can use"):  # still bad
        alter_properties(request(set={"lance.compaction.data_storage_version": "nope"}))
    _, rows = alter_properties(request(set={"lance.compaction.data_storage_version": "2.2"}))
    assert rows == [("lance.compaction.data_storage_version", "2.2")]
    lance.dataset(ds.uri).update_config({"lance.compaction.data_storage_version": "garbage!!"})
    _, rows = alter_properties(request(unset=["lance.compaction.data_storage_version"]))
    assert rows == []
    assert handle({"plan": lambda r: Result("x STRING", dry_run(CompactionRequest.of(r)))}, "plan", request())["ok"]


class InEngine:
    """maintain's compaction runner without Spark: every batch rewritten here, as a small
    batch is in local mode (compaction/engine_rewrite.py)."""

    def run(self, request, batch, number, dataset=None):
        from lance_compact.compaction import engine_rewrite
        return engine_rewrite.run_in_engine(request, batch, number, dataset, attempts=1)


def test_a_former_policy_key_is_read_and_written_under_its_new_name(tmp_path):
    """lance_compact.maintain.max_bytes (the former name of max_rewrite_bytes), as an older
    release wrote it or as SET writes it now, bounds maintain's compaction as the new key does."""
    old, new = PROPERTY_PREFIX + "max_bytes", PROPERTY_PREFIX + "max_rewrite_bytes"
    a, b = _write(str(tmp_path / "a.lance"), 20), _write(str(tmp_path / "b.lance"), 20)
    one = max(sum(d.file_size_bytes for d in f.metadata.files) for f in a.get_fragments())
    budget = str(one * 3)  # one task of two fragments (target 100 rows) of the ten
    request = lambda ds, **kw: json.dumps({"table": "db.x", "uri": ds.uri, **kw})  # noqa: E731
    a.update_config({old: budget})  # as the former release wrote it
    _, rows = alter_properties(request(b, set={old: budget}))  # SET of the former name writes the new one
    assert rows == [(new, budget)]
    p = resolve_policy(None, lance.dataset(a.uri).config(), None, "db.x")
    assert (p.get("max_rewrite_bytes"), p.source("max_rewrite_bytes")) == (one * 3, "table")
    assert p.origin("max_rewrite_bytes") == f"table property {old}"
    by_old = maintain_rows(request(a, params={"target_rows_per_fragment": 100}), InEngine())
    by_new = maintain_rows(request(b, params={"target_rows_per_fragment": 100}), InEngine())
    assert by_old == by_new
    compact = next(r for r in by_old if r[1] == "compact")
    assert compact[2] is True and "1 tasks, 2 fragments -> 1" in compact[5] and "9 tasks left for later" in compact[5]
    assert len(lance.dataset(a.uri).get_fragments()) == len(lance.dataset(b.uri).get_fragments()) == 19
    # the catalog's setting under its former name; a bad value is named as it was written
    p = resolve_policy(None, None, {"maintain.max_bytes": "7"}, "db.x", "lance")
    assert (p.get("max_rewrite_bytes"), p.origin("max_rewrite_bytes")) == (
        7, "catalog setting spark.sql.catalog.lance.maintain.max_bytes")
    with pytest.raises(CompactionError, match=f"table property {old} must be >= 1, got 0"):
        resolve_policy(None, {old: "0"}, None, "db.x")
    # both names at once: refused, naming the one to remove
    with pytest.raises(CompactionError, match=f"table property {new} is set twice, also under its former "
                                              f"name {old}: remove {old}"):
        resolve_policy(None, {old: "1", new: "2"}, None, "db.x")
    with pytest.raises(CompactionError, match="is set twice"):
        alter_properties(request(b, set={old: "1", new: "2"}))
    # UNSET of either name removes both
    version = lance.dataset(a.uri).version
    _, rows = alter_properties(request(a, unset=[new]))
    assert rows == [] and lance.dataset(a.uri).version == version + 1
    _, rows = alter_properties(request(b, unset=[old]))
    assert rows == []
