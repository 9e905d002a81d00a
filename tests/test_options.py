"""Option validation: one spec, checked in one place (no Spark needed)."""
import json

import pytest

from lance_compact.errors import CompactionError
from lance_compact.options import lance_options, option_specs
from lance_compact.compaction.request import CompactionRequest
from lance_compact.compaction.planners import get_planner


def test_only_given_options_reach_lance():
    assert lance_options("t", {"target_rows_per_fragment": None}, None) == {}
    assert lance_options("t", {"target_rows_per_fragment": 10}, {"num_threads": "2"}) == {
        "target_rows_per_fragment": 10, "num_threads": 2}


@pytest.mark.parametrize("key,text,value", [
    ("materialize_deletions", "FALSE", False),
    ("materialize_deletions_threshold", "0.25", 0.25),
    ("excluded_fragment_ids", "3, 1,2", [1, 2, 3]),
    ("compaction_mode", "try_binary_copy", "try_binary_copy"),
    ("max_bytes_per_file", " 2097152 ", 2097152),
])
def test_map_values_are_parsed_to_the_option_type(key, text, value):
    assert lance_options("t", None, {key: text}) == {key: value}


@pytest.mark.parametrize("params,extra,message", [
    (None, {"bogus": "1"}, "unknown options map key 'bogus'; valid options are: batch_size,"),
    ({"target_rows_per_fragment": 0}, None, "option target_rows_per_fragment must be >= 1, got 0"),
    ({"target_rows_per_fragment": True}, None, "option target_rows_per_fragment expects an integer"),
    (None, {"num_threads": "two"}, "option num_threads expects an integer, got 'two'"),
    (None, {"materialize_deletions_threshold": "1.5"}, "must be <= 1, got 1.5"),
    (None, {"materialize_deletions_threshold": "-0.1"}, "must be >= 0, got -0.1"),
    (None, {"materialize_deletions": "maybe"}, "option materialize_deletions expects true or false"),
    ({"compaction_mode": "fast"}, None,
     "option compaction_mode must be one of reencode, try_binary_copy, force_binary_copy, got 'fast'"),
    (None, {"excluded_fragment_ids": "1,x"}, "expects comma-separated integers"),
    ({"target_rows_per_fragment": 5}, {"target_rows_per_fragment": "6"}, "is given twice"),
])
def test_bad_options_are_rejected_with_the_table_and_option_named(params, extra, message):
    with pytest.raises(CompactionError) as e:
        lance_options("db.events", params, extra)
    assert message in e.value.message
    assert e.value.message.startswith("table db.events: ")


def test_every_unknown_key_error_lists_every_option():
    with pytest.raises(CompactionError) as e:
        lance_options("t", None, {"nope": "1"})
    for name in option_specs():
        assert name in e.value.message


def test_request_round_trips_and_takes_strategy_from_the_map():
    raw = {"table": "db.t", "uri": "/wh/db/t.lance", "params": {"target_rows_per_fragment": 7},
           "options": {"strategy": "default", "batch_size": "64"}}
    req = CompactionRequest.from_json(json.dumps(raw))
    assert req.strategy == "default"
    assert req.options == {"target_rows_per_fragment": 7, "batch_size": 64}
    assert CompactionRequest.from_json(req.to_json()) == req


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(CompactionError, match="unknown strategy 'fastest'; valid strategies are: default"):
        get_planner("fastest", "db.t")
    # A dotted name nobody registered is refused before anything is imported.
    with pytest.raises(CompactionError, match="unknown strategy 'json.JSONDecoder'.*strategies.<name>"):
        get_planner("json.JSONDecoder", "db.t", catalog="lance")
    from lance_compact.runtime import driver_conf
    try:
        driver_conf.load([("spark.sql.catalog.lance.strategies.gone", "no_such_module.Planner"),
                          ("spark.sql.catalog.lance.strategies.json", "json.JSONDecoder")])
        with pytest.raises(CompactionError, match="registered strategy 'gone'.*cannot be loaded"):
            get_planner("gone", "db.t", catalog="lance")
        with pytest.raises(CompactionError, match="is not a lance_compact.compaction.planners.Planner"):
            get_planner("json", "db.t", catalog="lance")
        with pytest.raises(CompactionError, match="unknown strategy 'json'; valid strategies are: "
                                                  "default, deletion_only, incremental, io_bounded \("):
            get_planner("json", "db.t", catalog="other")  # registered for another catalog only
    finally:
        driver_conf.load([])


def test_an_executor_on_another_pylance_refuses_the_task():
    import lance
    from lance_compact.compaction.execute import check_same_pylance

    check_same_pylance(lance.__version__)
    with pytest.raises(CompactionError, match="driver planned with pylance 0.0.1"):
        check_same_pylance("0.0.1")


def test_removing_uncommitted_files_never_touches_committed_ones(tmp_path):
    """The abort/conflict clean-up keeps any file the table references."""
    import lance
    from lance.optimize import Compaction

    from oracle import content, degraded_table
    from lance_compact.compaction.commit import remove_new_files

    uri = str(tmp_path / "t.lance")
    ds = degraded_table(uri, fragments=20, rows_per_fragment=20)
    before = content(ds)
    options = {"target_rows_per_fragment": 100}
    results = [t.execute(ds) for t in Compaction.plan(ds, options).tasks]
    request = CompactionRequest(table="t", uri=uri)
    Compaction.commit(lance.dataset(uri), results[:1], options)
    assert remove_new_files(request, results) == sum(len(f.files) for r in results[1:]
                                                      for f in r.new_fragments)
    assert content(lance.dataset(uri)) == before


# ---- the Python API is the spec's: signatures, docs, suggestions --------------------------

def test_every_procedure_function_has_exactly_the_specs_parameters():
    """compact, plan_compaction, describe_layout, cleanup, optimize_indices, maintain and
    maintain_warehouse: keyword-only parameters named as in parameters.json, in its order, None
    (the procedure's default) as default, with type hints; the docstring lists each with the
    spec's default."""
    import inspect

    from lance_compact import api

    own = {"spark", "table", "namespace", "catalog", "strategy", "options"}
    # positional and required, as the procedure needs them: create_index(spark, table, column, index_type)
    required = {"create_index": ("column", "index_type")}
    for procedure in api.PROCEDURE_SECTIONS:
        fn = getattr(api, procedure)
        params = inspect.signature(fn).parameters
        spec = api.procedure_parameters(procedure)
        assert [n for n in params if n not in own] == [e["name"] for e in spec if e["name"] not in own], procedure
        for e in spec:
            p = params[e["name"]]
            if e["name"] in required.get(procedure, ()):
                assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
                continue
            if e["name"] in own:
                continue
            assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None, (procedure, p)
            assert p.annotation is not inspect.Parameter.empty, (procedure, p)
            assert f"{e['name']} (" in fn.__doc__ and f"Default: {api._default_text(e)}." in fn.__doc__
        assert params["catalog"].kind is inspect.Parameter.KEYWORD_ONLY


def test_a_misspelled_keyword_gets_a_suggestion_in_python():
    from lance_compact import api

    with pytest.raises(TypeError, match=r"compact\(\) got an unexpected keyword argument 'target_row_per_fragment' "
                                        r"\(did you mean 'target_rows_per_fragment'\?\)"):
        api.compact(None, "db.t", target_row_per_fragment=5)
    with pytest.raises(TypeError, match=r"'histogramm' \(did you mean 'histogram'\?\)"):
        api.describe_layout(None, "db.t", histogramm=True)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'colour'$"):
        api.maintain(None, "db.t", colour="blue")


def test_a_misspelled_options_map_key_gets_a_suggestion_from_the_engine():
    with pytest.raises(CompactionError, match=r"unknown options map key 'target_row_per_fragment' "
                                              r"\(did you mean 'target_rows_per_fragment'\?\); valid options are: "):
        lance_options("t", None, {"target_row_per_fragment": "5"})


def test_the_engine_answers_each_failure_with_its_kind():
    """The kinds the JVM maps to error conditions (LanceCompactException.Kind): bad input,
    a cancel, the object store, a missing table (from the message's words), our bug."""
    from lance_compact import engine
    from lance_compact.runtime.cancellation import Cancelled

    def failing(error):
        def handler(envelope):
            raise error
        return {"layout": handler}

    request = json.dumps({"table": "db.t", "uri": "/nowhere/t.lance"})
    cases = [(CompactionError("table db.t: option x must be >= 1"), "invalid"),
             (Cancelled("table db.t: compact was cancelled; nothing was committed"), "cancelled"),
             (CompactionError("table db.t: /w/t.lance does not exist (no Lance dataset there)"), "missing"),
             (CompactionError("table db.t: cannot open /w: object store unreachable (connection refused)"), "storage"),
             (OSError("LanceError(IO): Generic S3 error: connection refused"), "storage"),
             (KeyError("x"), "bug")]
    for error, kind in cases:
        answer = engine.handle(failing(error), "layout", request)
        assert answer["ok"] is False and answer["kind"] == kind, (error, answer)


def test_no_rust_source_path_reaches_the_user():
    from lance_compact import engine

    def handler(envelope):
        raise CompactionError("table db.t: where 'id = 1.5' is not a predicate Lance can evaluate on this table "
                              "(Invalid user input: Received literal Float64(1.5), /home/runner/work/lance/lance/"
                              "rust/lance-datafusion/src/planner.rs:951:33)")
    answer = engine.handle({"layout": handler}, "layout", json.dumps({"table": "db.t", "uri": "/w/t.lance"}))
    assert answer["error"].endswith("Received literal Float64(1.5))") and ".rs:" not in answer["error"]


# ---- former names (parameters.json "aliases"): accepted for one release, the same result -----

def _io_bounded(options: dict, params: dict | None = None) -> CompactionRequest:
    return CompactionRequest.from_json(json.dumps({"table": "db.t", "uri": "/wh/db/t.lance", "strategy": "io_bounded",
                                                   "params": params or {}, "options": options}))


def test_every_former_name_is_unambiguous():
    """A former name is no procedure's current parameter and means one thing per procedure."""
    from lance_compact import api

    for procedure in api.PROCEDURE_SECTIONS:
        entries = api.procedure_parameters(procedure)
        names = {e["name"] for e in entries}
        former = [a for e in entries for a in e.get("aliases", ())]
        assert not names & set(former) and len(former) == len(set(former)), procedure
    assert {a for e in api.procedure_parameters("maintain") for a in e.get("aliases", ())} == {"max_bytes"}


@pytest.mark.parametrize("old,new", [("max_bytes", "max_rewrite_bytes"), ("max_rows", "max_rewrite_rows"),
                                     ("max_fragments", "max_rewrite_fragments")])
def test_a_former_setting_name_is_its_new_name_with_a_warning(old, new, caplog):
    from lance_compact import options

    options._WARNED.clear()
    with caplog.at_level("WARNING", logger="lance_compact.options"):
        by_old, by_new = _io_bounded({old: "1000"}), _io_bounded({new: "1000"})
    assert by_old == by_new and by_old.settings == {new: 1000}
    assert _io_bounded({}, {old: 1000}).settings == {new: 1000}  # as a parameter (PySpark's options map)
    assert f"options map key {old} is deprecated: it is the former name of {new}" in caplog.text
    with pytest.raises(CompactionError, match=f"option {new} is given twice \\(as {new} and as {old}, one the "
                                              "former name of the other\\)"):
        _io_bounded({new: "1", old: "2"})
    with pytest.raises(CompactionError, match=f"setting {new} belongs to strategy io_bounded, not default"):
        CompactionRequest.from_json(json.dumps({"table": "db.t", "uri": "/wh/db/t.lance", "options": {old: "1"}}))


def test_former_procedure_parameter_names_are_their_new_names():
    from lance_compact.runtime.envelope import checked_args

    assert checked_args("maintain", {"max_bytes": 5}, "db.t") == checked_args("maintain", {"max_rewrite_bytes": 5}, "db.t")
    assert checked_args("maintain", {"max_bytes": 5}, "db.t")["max_rewrite_bytes"] == 5
    wh = checked_args("maintain_warehouse", {"max_bytes": 5}, "the warehouse")
    assert wh == checked_args("maintain_warehouse", {"max_total_rewrite_bytes": 5}, "the warehouse")
    assert wh["max_total_rewrite_bytes"] == 5 and "max_bytes" not in wh
    with pytest.raises(CompactionError, match="maintain parameter max_rewrite_bytes is given twice"):
        checked_args("maintain", {"max_rewrite_bytes": 5, "max_bytes": 6}, "db.t")
    with pytest.raises(CompactionError, match="option max_rewrite_bytes must be >= 1, got 0"):
        checked_args("maintain", {"max_bytes": 0}, "db.t")  # checked as the new name


def test_the_python_functions_take_a_former_keyword_once():
    from lance_compact import api

    with pytest.raises(TypeError, match="maintain\\(\\) got max_rewrite_bytes twice: as max_rewrite_bytes and as "
                                        "max_bytes, its former name"):
        api.maintain(None, "db.t", max_rewrite_bytes=5, max_bytes=6)
    assert "Formerly ``max_bytes``" in api.maintain_warehouse.__doc__


def test_sql_and_python_take_the_same_compaction_options():
    """Every compaction option, setting and run setting the Python API takes as a keyword is a
    named CALL parameter too (issue 43: num_threads worked from Python and was refused in SQL)."""
    import inspect
    import json
    from pathlib import Path

    import lance_compact
    from lance_compact.api import compact

    spec = json.loads((Path(lance_compact.__file__).parent / "parameters.json").read_text())
    python = set(inspect.signature(compact).parameters) - {"spark", "table", "catalog", "strategy", "options"}
    sql = {e["name"] for section in ("options", "settings", "run_settings") for e in spec[section] if e.get("sql")}
    assert python == sql, (python - sql, sql - python)
