"""The engine's typed boundary without Spark: a request parsed once (runtime/envelope.py),
bad requests refused with a clear error, answers made into rows at the edge (engine.handle)."""
from __future__ import annotations

import json

import lance
import pyarrow as pa
import pytest

from lance_compact.engine import handle
from lance_compact.errors import CompactionError
from lance_compact.runtime.envelope import DEFAULT_CATALOG, Envelope, Result, TableEntry


def test_a_request_is_parsed_once_into_its_target_and_checked_arguments():
    e = Envelope.parse("maintain", json.dumps({
        "table": "db.t", "uri": "/wh/db/t.lance", "storage_options": {"k": "v"}, "catalog": "mine",
        "maintain_settings": {"maintain.priority": "3"}, "params": {"min_small_fragments": 4}}))
    t = e.target
    assert (t.table, t.uri, dict(t.storage_options), t.catalog, dict(t.maintain_settings)) == \
        ("db.t", "/wh/db/t.lance", {"k": "v"}, "mine", {"maintain.priority": "3"})
    # dry_run and fail_on_error are maintain's own parameters: their defaults are filled; the thresholds are policy
    # keys, left unset so the table's property, the catalog's setting or the default applies
    assert dict(e.args) == {"min_small_fragments": 4, "dry_run": False, "fail_on_error": False}


def test_a_warehouse_request_lists_its_tables_in_one_shape():
    e = Envelope.parse("maintain_warehouse", {"namespace": "db", "tables": [
        {"namespace": "db", "table": "a", "uri": "/wh/db/a.lance"}]})
    assert e.target is None and e.where == "namespace db"
    assert e.tables == (TableEntry("db", "a", "/wh/db/a.lance"),) and e.tables[0].qualified == "db.a"
    assert e.args["parallelism"] == 64 and e.args["dry_run"] is False
    assert e.catalog is None and e.catalog_name == DEFAULT_CATALOG
    with pytest.raises(CompactionError, match="tables must be objects with table and uri"):
        Envelope.parse("table_health", {"tables": [["db", "a", "/wh/db/a.lance"]]})  # the old array shape


@pytest.mark.parametrize("text, message", [
    ("{not json", "the cleanup request is not valid JSON"),
    ("[1, 2]", "the cleanup request is not a JSON object"),
    ('{"uri": "/x", "storage_options": "k=v"}', "storage_options is not an object"),
    ('{"uri": "/x", "params": {"retain_version": 1}}', "unknown cleanup parameter 'retain_version'"),
    ('{"uri": "/x", "params": {"retain_versions": "many"}}', "option retain_versions expects an integer"),
])
def test_a_bad_request_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(CompactionError, match=message):
        Envelope.parse("cleanup", text)


def test_results_own_their_columns_and_rows_are_made_at_the_edge():
    r = Result.of("cleanup_columns", [{"table": "t", "version": 3, "dry_run": True}])
    rows = r.json_rows()
    assert len(rows) == 1 and rows[0][:3] == ["t", 3, True] and set(rows[0][3:]) == {None}
    assert r.schema.startswith("`table` string, `version` long")
    # rows as sequences the JVM reads as JSON arrays: tuples pass as they are (no copy of a
    # million-row answer), anything else becomes a list
    assert json.dumps(Result("`x` INT", [(1,), (2,)]).json_rows()) == "[[1], [2]]"
    assert Result("`x` INT", [range(1, 2)]).json_rows() == [[1]]


def test_handle_parses_once_and_answers_with_the_handlers_result(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri)
    seen = []

    def describe(request: Envelope) -> Result:
        seen.append(request)
        return Result("`version` BIGINT", [(request.require_target().open().version,)])

    answer = handle({"describe": describe}, "describe", json.dumps({"table": "db.t", "uri": uri}))
    assert json.loads(json.dumps(answer)) == {"ok": True, "schema": "`version` BIGINT", "rows": [[1]]}
    assert isinstance(seen[0], Envelope) and seen[0].target.table == "db.t"
    # a request that is not an object, or names no table, is an answer too, not a crash
    assert handle({"describe": describe}, "describe", "[]")["error"] == \
        "engine: the describe request is not a JSON object"
    assert handle({"describe": describe}, "describe", "{}")["error"] == \
        "engine: the describe request names no table"
    # a parameter error keeps the request's own secrets out of the answer
    bad = handle({"cleanup": describe}, "cleanup", json.dumps(
        {"uri": uri, "storage_options": {"secret": "hunter2-secret"},
         "params": {"retain_versions": "hunter2-secret"}}))
    assert not bad["ok"] and "option retain_versions expects an integer" in bad["error"]
    assert "hunter2-secret" not in bad["error"]
