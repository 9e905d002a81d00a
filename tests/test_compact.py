"""CALL lance.compact end to end on real local Spark and real Lance datasets."""
import shutil
import time

import lance
import pytest

from conftest import jobs_described
from oracle import content, degraded_table
from lance_compact import LanceCompaction, compact

RESULT_COLUMNS = ["table", "strategy", "read_version", "new_version", "tasks", "tasks_left",
                  "fragments_left", "fragments_removed",
                  "fragments_added", "files_removed", "files_added", "rows_rewritten",
                  "deleted_rows_removed", "bytes_read", "bytes_written", "commits", "retries",
                  "tasks_conflicted", "tasks_rebased", "conflicts", "tasks_failed", "elapsed_ms",
                  "sort_order", "index_coverage"]  # the last two: clustering's (null here)


def fragment_rows(ds):
    return [(f.count_rows(), f.metadata.physical_rows) for f in ds.get_fragments()]


def pylance_layout(path, tmp_path, **options):
    """The fragments pylance's own compact_files gives on a copy, with the same options."""
    copy = tmp_path / "copy.lance"
    shutil.copytree(path, copy)
    ds = lance.dataset(str(copy))
    ds.optimize.compact_files(**options)
    return fragment_rows(lance.dataset(str(copy)))


def compacted_like_pylance(path, before, expected_layout):
    """The table after a CALL: the layout pylance gives, and exactly the rows it had."""
    after = lance.dataset(str(path))
    assert fragment_rows(after) == expected_layout
    assert content(after) == content(before)
    return after


@pytest.mark.parametrize("sql_args,options", [
    ("", {}),
    ("target_rows_per_fragment => 300", {"target_rows_per_fragment": 300}),
    ("target_rows_per_fragment => 500, materialize_deletions_threshold => 0.05",
     {"target_rows_per_fragment": 500, "materialize_deletions_threshold": 0.05}),
    ("target_rows_per_fragment => 200, materialize_deletions => false",
     {"target_rows_per_fragment": 200, "materialize_deletions": False}),
])
def test_content_is_unchanged_and_layout_equals_pylance(spark, fresh_table, tmp_path, sql_args, options):
    table, path = fresh_table
    before = lance.dataset(str(path))
    expected_layout = pylance_layout(path, tmp_path, **options)

    args = f"table => '{table}'" + (f", {sql_args}" if sql_args else "")
    rows = spark.sql(f"CALL lance.compact({args})").collect()

    assert len(rows) == 1 and rows[0].__fields__ == RESULT_COLUMNS
    r = rows[0].asDict()
    after = lance.dataset(str(path))
    assert content(after) == content(before)
    assert fragment_rows(after) == expected_layout
    # Every figure is measured against what is on disk now.
    assert r["table"] == table and r["read_version"] == before.version
    assert r["new_version"] == after.version > before.version
    assert r["tasks"] >= 1 and r["commits"] == 1
    assert r["retries"] == r["tasks_conflicted"] == r["tasks_failed"] == 0
    assert r["fragments_removed"] - r["fragments_added"] == \
        len(before.get_fragments()) - len(after.get_fragments())
    rewritten = {f.fragment_id for f in before.get_fragments()} - {f.fragment_id for f in after.get_fragments()}
    old = [f for f in before.get_fragments() if f.fragment_id in rewritten]
    new = [f for f in after.get_fragments() if f.fragment_id not in {g.fragment_id for g in before.get_fragments()}]
    assert r["fragments_removed"] == len(old) and r["fragments_added"] == len(new)
    assert r["rows_rewritten"] == sum(f.count_rows() for f in new) == sum(f.count_rows() for f in old)
    assert r["deleted_rows_removed"] == sum(f.metadata.deletion_file.num_deleted_rows
                                            for f in old if f.metadata.deletion_file)
    assert r["bytes_read"] == sum(d.file_size_bytes for f in old for d in f.metadata.files)
    assert r["bytes_written"] == sum(d.file_size_bytes for f in new for d in f.metadata.files)
    assert r["elapsed_ms"] > 0


def test_no_op_returns_zero_counts_and_keeps_the_version(spark, fresh_table):
    table, path = fresh_table
    spark.sql(f"CALL lance.compact(table => '{table}')").collect()
    version = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.compact(table => '{table}')").collect()[0].asDict()
    assert lance.dataset(str(path)).version == version
    assert r["read_version"] == r["new_version"] == version
    assert all(r[c] == 0 for c in RESULT_COLUMNS[4:-3] if c != "conflicts"), r
    assert r["conflicts"] is None and r["sort_order"] is None and r["index_coverage"] is None


def test_positional_arguments_and_system_namespace(spark, fresh_table, tmp_path):
    table, path = fresh_table
    before = lance.dataset(str(path))
    expected_layout = pylance_layout(path, tmp_path, target_rows_per_fragment=400,
                                     materialize_deletions_threshold=0.5)
    # table, target_rows_per_fragment, max_rows_per_group, max_bytes_per_file,
    # materialize_deletions, then a named one after the positional ones.
    r = spark.sql(f"CALL lance.system.compact('{table}', 400, NULL, NULL, true, "
                  "materialize_deletions_threshold => 0.5)").collect()[0]
    after = compacted_like_pylance(path, before, expected_layout)
    assert r.tasks >= 1 and r.new_version == after.version


def test_path_in_the_warehouse_and_the_options_map(spark, fresh_table, tmp_path):
    _, path = fresh_table
    before = lance.dataset(str(path))
    expected_layout = pylance_layout(path, tmp_path, target_rows_per_fragment=250, batch_size=64)
    r = spark.sql(f"CALL lance.compact(table => '{path}', "
                  "options => map('target_rows_per_fragment', '250', 'batch_size', 64))").collect()[0]
    after = compacted_like_pylance(path, before, expected_layout)
    assert r.table == str(path) and r.new_version == after.version


def test_every_python_keyword_is_a_named_call_parameter(spark, fresh_table, tmp_path):
    """What Python takes as a keyword SQL takes by name (num_threads was refused in SQL)."""
    _, path = fresh_table
    before = lance.dataset(str(path))
    expected_layout = pylance_layout(path, tmp_path, target_rows_per_fragment=250, batch_size=64, num_threads=1)
    r = spark.sql(f"CALL lance.compact(table => '{path}', target_rows_per_fragment => 250, num_threads => 1, "
                  "batch_size => 64, carry_over_deletes => true)").collect()[0]
    after = compacted_like_pylance(path, before, expected_layout)
    assert r.new_version == after.version


def test_pyspark_api_returns_the_metrics_dataframe(spark, fresh_table, tmp_path):
    table, path = fresh_table
    before = lance.dataset(str(path))
    expected_layout = pylance_layout(path, tmp_path, target_rows_per_fragment=700, num_threads=1)
    df = LanceCompaction(spark, table).option("target_rows_per_fragment", 700) \
        .option("materialize_deletions", True).option("num_threads", 1).execute()
    assert df.columns == RESULT_COLUMNS
    r = df.collect()[0]
    after = compacted_like_pylance(path, before, expected_layout)
    assert r.read_version == before.version and r.new_version == after.version
    # The function form; nothing left to do now.
    again = compact(spark, table, target_rows_per_fragment=700).collect()[0]
    assert again.tasks == 0 and again.new_version == after.version


def test_binary_copy_mode_copies_pages_and_keeps_content(spark, warehouse, tmp_path):
    """compaction_mode reaches Lance: binary copy keeps the small fragments' pages as they are,
    so its data files differ from a re-encode's. The signal: our files have exactly the sizes of
    pylance's own try_binary_copy on a copy of the table, not those of its reencode."""
    path = warehouse / "db" / "binary.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path), delete_every=0)
    before = lance.dataset(str(path))
    by_pylance = {}
    for mode in ["try_binary_copy", "reencode"]:
        copy = tmp_path / f"{mode}.lance"
        shutil.copytree(path, copy)
        lance.dataset(str(copy)).optimize.compact_files(target_rows_per_fragment=1000, compaction_mode=mode)
        by_pylance[mode] = data_file_sizes(lance.dataset(str(copy)))
    assert by_pylance["try_binary_copy"] != by_pylance["reencode"]  # the signal tells them apart
    r = spark.sql("CALL lance.compact(table => 'db.binary', compaction_mode => 'try_binary_copy', "
                  "target_rows_per_fragment => 1000)").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 1 and r.deleted_rows_removed == 0
    assert data_file_sizes(after) == by_pylance["try_binary_copy"]
    assert content(after) == content(before)


def data_file_sizes(ds) -> list[int]:
    return sorted(f.file_size_bytes for fragment in ds.get_fragments() for f in fragment.metadata.files)


def test_table_config_applies_when_an_option_is_not_given(spark, fresh_table, tmp_path):
    """Unset parameters leave Lance's per-table lance.compaction.* settings in force."""
    table, path = fresh_table
    lance.dataset(str(path)).update_config({"lance.compaction.target_rows_per_fragment": "300"})
    expected_layout = pylance_layout(path, tmp_path)  # pylance reads the same table config
    spark.sql(f"CALL lance.compact(table => '{table}')").collect()
    after = lance.dataset(str(path))
    assert fragment_rows(after) == expected_layout
    assert max(rows for rows, _ in expected_layout) < 600  # the config, not the 1M default, applied


def test_a_users_own_strategy_registered_with_the_catalog(spark, fresh_table):
    """The README's worked example, registered as spark.sql.catalog.lance.strategies.skip_newest
    (conftest.STRATEGIES): the 10 newest fragments are left alone."""
    table, path = fresh_table
    before = lance.dataset(str(path))
    newest = sorted(f.fragment_id for f in before.get_fragments())[-10:]
    r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300, "
                  "strategy => 'skip_newest')").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 1 and r.strategy == "skip_newest"
    assert set(newest) <= {f.fragment_id for f in after.get_fragments()}
    assert content(after) == content(before)


def test_progress_is_said_in_the_ui_and_to_the_caller(spark, fresh_table):
    """Every step shows in the Spark UI as a job named for its table and step (local mode's
    in-engine rewrite too); the caller that set the progress key reads the statement's line
    while it runs; a PySpark call with the line switched on returns the same result."""
    import threading

    from lance_compact import progress_line

    table, path = fresh_table
    jvm = spark.sparkContext._jvm
    key = "progress-test-key"
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            said = jvm.io.github.lancecompact.spark.engine.Progress.line(key)
            if said and (not seen or seen[-1] != said):
                seen.append(said)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sc = spark.sparkContext
    sc.setLocalProperty(progress_line.KEY_PROPERTY, key)
    try:
        row = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 1000, "
                        "options => map('test_task_sleep_ms', 'all:400'))").collect()[0]
    finally:
        sc.setLocalProperty(progress_line.KEY_PROPERTY, None)
        done.set()
        watcher.join(5)
    assert row.tasks > 0
    assert any(s.startswith(f"{table}: batch 1 of 1, rewriting {row.tasks} tasks") for s in seen), seen
    assert jvm.io.github.lancecompact.spark.engine.Progress.line(key) == ""  # forgotten once answered
    described = jobs_described(spark, f"lance_compact compact {table}:")
    assert f"lance_compact compact {table}: planning" in described, described
    assert any(d.startswith(f"lance_compact compact {table}: batch 1 of 1, rewriting") for d in described), described
    assert f"lance_compact compact {table}: batch 1: committing" in described, described

    # cleanup shows too; and the PySpark API with the line switched on (no terminal: drawn nowhere)
    spark.sql(f"CALL lance.cleanup(table => '{table}', dry_run => true)").collect()
    assert f"lance_compact cleanup {table}: cleanup" in jobs_described(spark, "lance_compact cleanup")
    spark.conf.set(progress_line.SETTING, "true")
    try:
        again = compact(spark, table, target_rows_per_fragment=1000).collect()[0]
    finally:
        spark.conf.unset(progress_line.SETTING)
    assert again.tasks == 0 and again.new_version == again.read_version
    # Spark metrics for every procedure (the plugin's source; here read from its registry)
    registry = jvm.io.github.lancecompact.spark.engine.MaintenanceMetrics.registry()
    assert registry.counter("procedure.compact.calls").getCount() >= 2
    assert registry.timer("procedure.compact.duration").getCount() >= 2
    assert registry.counter("procedure.cleanup.calls").getCount() >= 1


def test_a_warehouse_run_shows_each_table_once_in_the_ui_and_every_step_on_the_line():
    """progress.PerTable: every step reaches the caller's line, prefixed with the run's count;
    the UI gets a table's first step only, whichever lane says it."""
    import threading

    from lance_compact.runtime import progress

    said: list[tuple[str, bool]] = []
    done = [0]
    line = progress.PerTable(progress.Reporter(lambda text, ui: said.append((text, ui)), coalesce=False),
                             lambda: f"tables {done[0]} of 2 done; ")

    def lane(table: str) -> None:
        with progress.serving(line.table(table)):
            for step in ("compact", "planning", "batch 1 of 1, rewriting 3 tasks", "optimize_indices"):
                progress.report(f"{table}: {step}")

    lanes = [threading.Thread(target=lane, args=(t,)) for t in ("db.a", "db.b")]
    for x in lanes:
        x.start()
    for x in lanes:
        x.join()
    assert len(said) == 8 and all(text.startswith("tables 0 of 2 done; db.") for text, _ in said)
    assert sorted(text for text, ui in said if ui) == ["tables 0 of 2 done; db.a: compact",
                                                       "tables 0 of 2 done; db.b: compact"]


def test_the_callers_line_is_coalesced_but_ui_steps_and_the_newest_line_always_arrive():
    """progress.Reporter: lines for the caller only (ui False) within 0.1 s of the last one sent
    wait, and only the newest waiting one is sent (each is a Py4J round trip); a UI step is
    sent at once, and the newest line arrives within the interval."""
    import time

    from lance_compact.runtime import progress

    said: list[tuple[str, bool]] = []
    line = progress.Reporter(lambda text, ui: said.append((text, ui)))
    line("db.t: compact", True)
    for i in range(50):
        line(f"db.t: batch {i}", False)
    assert said == [("db.t: compact", True)]  # within the interval of the UI step: they wait
    deadline = time.monotonic() + 5
    while len(said) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said == [("db.t: compact", True), ("db.t: batch 49", False)]  # only the newest
    line("db.t: optimize_indices", True)  # a UI step: at once
    assert said[-1] == ("db.t: optimize_indices", True)
    time.sleep(progress.COALESCE_S * 1.5)
    line("db.t: cleanup", False)  # the interval has passed: at once
    assert said[-1] == ("db.t: cleanup", False) and len(said) == 4


def test_figures_go_in_batches_in_the_order_they_were_taken_and_the_rest_at_the_end():
    """progress.Reporter.figures: the first at once, those within COALESCE_S in one call (one
    JSON object a line, in order, each whole), the flusher's batch when its turn comes, and what
    still waits at the request's end (flush_figures, as the engine calls before it answers)."""
    import json
    import time

    from lance_compact.runtime import progress

    calls: list[list[dict]] = []
    line = progress.Reporter(lambda text, ui: None,
                             lambda batch: calls.append([json.loads(x) for x in batch.split("\n")]))
    line.figures({"kind": "layout", "table": "db.a\nb", "n": 0})  # a line break in a name stays escaped
    for i in range(1, 20):
        line.figures({"kind": "progress", "n": i})
    assert [[f["n"] for f in c] for c in calls] == [[0]]
    assert calls[0][0]["table"] == "db.a\nb"
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [f["n"] for f in calls[1]] == list(range(1, 20))  # one call, in order
    line.figures({"kind": "cost", "n": 20})  # within the interval of the flusher's batch: waits
    line.figures({"kind": "cost", "n": 21})
    line.flush_figures()  # the request's end
    assert [f["n"] for f in calls[2]] == [20, 21] and len(calls) == 3
    time.sleep(progress.COALESCE_S * 2)
    assert len(calls) == 3  # the flusher's later turn found nothing to send
    line.flush_figures()
    assert len(calls) == 3


def test_a_coalesced_line_never_arrives_after_a_newer_one():
    """progress.Reporter: the flusher's thread takes the waiting line, and a step is said on
    the work's thread before the flusher has sent it: the caller still gets them in the order
    they were said, never the older one last."""
    import threading
    import time

    from lance_compact.runtime import progress

    said: list[str] = []
    flusher_sending, newer_said = threading.Event(), threading.Event()

    def send(text: str, ui: bool) -> None:
        if threading.current_thread().name == "progress-flusher":
            flusher_sending.set()
            newer_said.wait(2)  # the work's thread says its step meanwhile
        said.append(text)

    line = progress.Reporter(send)
    line("db.t: compact", True)
    line("db.t: batch 1", False)  # waits for the flusher
    assert flusher_sending.wait(5)
    threading.Timer(0.2, newer_said.set).start()  # the flusher sends on 0.2 s later
    line("db.t: optimize_indices", True)
    deadline = time.monotonic() + 2
    while "db.t: batch 1" not in said and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said == ["db.t: compact", "db.t: batch 1", "db.t: optimize_indices"], said


def test_a_tables_first_step_is_shown_in_the_ui_when_another_lane_said_its_own_first():
    """progress.Reporter under a warehouse run's two lanes: lane A takes its table's first step,
    lane B takes and sends its own before A's is sent. A's first step is still a UI job (it was
    dropped as 'older', and the table's second step, 'planning', became its UI job: the CI run
    of stop 50 failed test_maintain_warehouse on it); a caller-only line that late is dropped.
    Tables whose names differ after a ':' are told apart (PerTable keyed them by the text before
    its first ':', so 'db.c:1' and 'db.c:2' shared one UI job)."""
    from lance_compact.runtime import progress

    said: list[tuple[str, bool]] = []
    parent = progress.Reporter(lambda text, ui: said.append((text, ui)), coalesce=False)
    # the two lanes' lines, numbered as taken (1: A's, 2: B's) and sent in the other order
    parent._deliver("wb.t: compact", True, 2)
    parent._deliver("wa.t: compact", True, 1)
    parent._deliver("wa.t: batch 1", False, 1)
    assert said == [("wb.t: compact", True), ("wa.t: compact", True)], said
    said.clear()
    lines = progress.PerTable(progress.Reporter(lambda text, ui: said.append((text, ui)), coalesce=False),
                              lambda: "tables 0 of 2 done; ")
    one, two = lines.table("db.c:1"), lines.table("db.c:2")
    one("db.c:1: compact"), two("db.c:2: compact"), one("db.c:1: planning")
    assert said == [("tables 0 of 2 done; db.c:1: compact", True), ("tables 0 of 2 done; db.c:2: compact", True),
                    ("tables 0 of 2 done; db.c:1: planning", False)], said
