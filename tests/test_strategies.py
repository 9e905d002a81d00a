"""Planning strategies: property tests over randomized layouts, then real CALLs."""
import random
import shutil

import lance
import pytest
from lance.optimize import Compaction

from conftest import NO_VERSION_FLOOR
from oracle import batch, content, layout
from lance_compact import FragmentHistogram, cleanup, describe_layout, plan_compaction
from lance_compact.compaction.planners import get_planner
from lance_compact.compaction.planners.io_bounded import benefit

# Every rewrite a Spark job, as on a cluster (local mode would rewrite these small batches in
# the engine process: engine_rewrite.py, tested in test_engine_rewrite.py and by most modules).
SPARK_CONF = {"spark.lance.compact.engineRewrite.maxBatchBytes": "0", **NO_VERSION_FLOOR}  # cleanup of young versions


def random_layout(path, seed, index=True):
    """Fragments of random sizes from random appends, random deletions, and (optionally) a
    BTREE index built midway so that later fragments are unindexed."""
    rng = random.Random(seed)
    shutil.rmtree(path, ignore_errors=True)
    start, ds = 0, None
    appends = rng.randint(8, 30)
    for i in range(appends):
        n = rng.choice([1, 5, 20, 50, 120, 400])
        ds = lance.write_dataset(batch(start, n, dim=4, seed=seed), str(path),
                                 mode="create" if ds is None else "append")
        start += n
        if index and i == appends // 2:
            ds.create_scalar_index("id", index_type="BTREE")
    for _ in range(rng.randint(0, 6)):
        lo = rng.randrange(start)
        ds.delete(f"id >= {lo} AND id < {lo + rng.randint(1, 60)} AND id % {rng.randint(1, 4)} = 0")
    return lance.dataset(str(path))


def random_options(rng):
    return {"target_rows_per_fragment": rng.choice([30, 100, 250, 1000]),
            "materialize_deletions_threshold": rng.choice([0.0, 0.05, 0.1, 0.5]),
            "materialize_deletions": rng.random() > 0.2}


def task_groups(tasks):
    return [sorted(f.id for f in t.fragments) for t in tasks]


SEEDS = range(25)


@pytest.fixture(params=SEEDS)
def seeded(request, tmp_path):
    """Per seed: its random numbers and a random layout made with the same seed."""
    return random.Random(request.param), random_layout(tmp_path / "t.lance", request.param)


def selects_only(plan, allowed: set[int]) -> bool:
    return all(set(t.fragment_ids) <= allowed for t in plan.tasks)


def test_default_groups_exactly_what_lance_plans(seeded):
    rng, ds = seeded
    options = random_options(rng)
    ours = get_planner("default", "t").plan(ds, options)
    assert [t.fragment_ids for t in ours.tasks] == task_groups(Compaction.plan(ds, options).tasks)
    assert all(t.selected for t in ours.tasks)


def test_deletion_only_never_selects_clean_fragments(seeded):
    rng, ds = seeded
    with_deletions = {f.fragment_id for f in ds.get_fragments() if f.metadata.deletion_file}
    assert selects_only(get_planner("deletion_only", "t").plan(ds, random_options(rng)), with_deletions)


def test_incremental_never_selects_fragments_unchanged_since_its_version(seeded):
    rng, ds = seeded
    since = ds.version
    old = {f.fragment_id: (f.metadata.deletion_file and f.metadata.deletion_file.num_deleted_rows)
           for f in ds.get_fragments()}
    n0 = ds.count_rows() + 10_000
    for i in range(rng.randint(1, 5)):  # streaming continues: appends and deletes
        ds = lance.write_dataset(batch(n0 + 100 * i, rng.randint(1, 40), dim=4), str(ds.uri), mode="append")
    ds.delete(f"id % {rng.randint(7, 30)} = 3")
    ds = lance.dataset(ds.uri)
    changed = {f.fragment_id for f in ds.get_fragments()
               if f.fragment_id not in old
               or (f.metadata.deletion_file and f.metadata.deletion_file.num_deleted_rows) != old[f.fragment_id]}
    assert selects_only(get_planner("incremental", "t", {"since_version": since}).plan(ds, random_options(rng)),
                        changed)


def test_each_task_cut_from_the_plan_is_lances_own_json(seeded):
    """planners/base.py reads each task from the plan's JSON (task_sources): what a Spark task
    receives is exactly CompactionTask.json(), task by task, and its facts are that task's."""
    from lance_compact.compaction.fragment_facts import task_facts
    from lance_compact.compaction.planners.base import task_sources

    rng, ds = seeded
    planned = Compaction.plan(ds, random_options(rng))
    sources, own = task_sources(planned), [t.json() for t in planned.tasks]
    assert [s.text() for s in sources] == own
    for s, text in zip(sources, own):
        a, b = s.facts(), task_facts(text)
        assert (a.ids.tolist(), a.physical.tolist(), a.deleted.tolist(), a.bytes) == \
            (b.ids.tolist(), b.physical.tolist(), b.deleted.tolist(), b.bytes)


def test_the_documented_select_example_leaves_tasks_without_deletions(seeded):
    """docs/strategies.md's ``select`` example (examples/my_planners.py), on Lance's plan: the
    tasks with deleted rows run now, the others are left with a reason; every field the page
    names is there and agrees with Lance's task."""
    from my_planners import DeletionsNow

    rng, ds = seeded
    plan = DeletionsNow().plan(ds, random_options(rng))
    for t in plan.tasks:
        assert t.selected == (t.deleted_rows > 0)
        assert t.selected or t.reason.endswith("left for a later run: no deleted rows")
        lance_task = t.task
        assert [f.id for f in lance_task.fragments] == t.fragment_ids
        assert t.rows == sum(f.physical_rows - (f.deletion_file.num_deleted_rows if f.deletion_file else 0)
                             for f in lance_task.fragments)
        assert t.json == t.task_json() == lance_task.json() and t.expected_output_fragments >= 1


def test_io_bounded_stays_within_budget_and_takes_the_best_first(seeded):
    rng, ds = seeded
    options = random_options(rng)
    full = get_planner("default", "t").plan(ds, options)
    budget = {"max_rewrite_bytes": rng.randint(1, 3) * 20_000, "max_rewrite_fragments": rng.randint(2, 20)}
    plan = get_planner("io_bounded", "t", budget).plan(ds, options)
    chosen = plan.selected
    fits = [t for t in full.tasks if t.bytes <= budget["max_rewrite_bytes"]
            and len(t.fragment_ids) <= budget["max_rewrite_fragments"]]
    if not fits and chosen:
        # no task fits whole: the first fragments of one, planned again by Lance alone; the
        # other tasks are left as Lance planned them
        assert len(plan.tasks) == len(full.tasks) - 1 + len(chosen) and not any(t in chosen for t in plan.left)
        cut = [t for t in full.tasks if [u.fragment_ids for u in full.tasks if u is not t] ==
               [u.fragment_ids for u in plan.left]]
        assert cut, plan.tasks
        assert [f for t in chosen for f in t.fragment_ids] == cut[0].fragment_ids[:sum(len(t.fragment_ids) for t in chosen)]
        assert all("planned again alone" in t.reason for t in chosen)
    else:
        assert [t.fragment_ids for t in plan.tasks] == [t.fragment_ids for t in full.tasks]
    assert sum(t.bytes for t in chosen) <= budget["max_rewrite_bytes"]
    assert sum(len(t.fragment_ids) for t in chosen) <= budget["max_rewrite_fragments"]
    for t in plan.left:  # a task was left only because it did not fit beside better ones
        assert "left for a later run" in t.reason
        better = [c for c in chosen if benefit(c) / max(1, c.bytes) >= benefit(t) / max(1, t.bytes)]
        fits_alone = t.bytes <= budget["max_rewrite_bytes"] and len(t.fragment_ids) <= budget["max_rewrite_fragments"]
        assert better or not fits_alone
    if full.tasks and not chosen:  # nothing fits, not even two fragments of the best task planned alone
        assert not fits


def test_io_bounded_progresses_where_every_task_is_over_the_budget(tmp_path):
    """A huge table's tasks can each be larger than the budget (a million fragments of 10 rows:
    nine tasks of about 111,000 fragments; Lance's own max_source_fragments then plans nothing,
    and io_bounded planned nothing before, run after run): the best task's first fragments
    within the budget are planned again by Lance and chosen, and runs converge."""
    import pyarrow as pa

    path = tmp_path / "many.lance"
    for i in range(60):
        lance.write_dataset(pa.table({"id": list(range(i * 10, i * 10 + 10))}), str(path),
                            mode="create" if i == 0 else "append")
    ds = lance.dataset(str(path))
    before = content(ds)
    assert Compaction.plan(ds, {"max_source_fragments": 25}).num_tasks() == 0  # Lance's own limit
    counts = [len(ds.get_fragments())]
    for _ in range(10):
        plan = get_planner("io_bounded", "t", {"max_rewrite_fragments": 25}).plan(ds, {})
        if not plan.selected:
            break
        assert sum(len(t.fragment_ids) for t in plan.selected) <= 25
        Compaction.commit(ds, [t.task.execute(ds) for t in plan.selected])
        ds = lance.dataset(str(path))
        counts.append(len(ds.get_fragments()))
    assert counts == [60, 36, 12, 1], counts  # 25 into 1 each run, then the last 12
    assert content(ds) == before
    rows = get_planner("io_bounded", "t", {"max_rewrite_rows": 95}).plan(
        random_layout(tmp_path / "r.lance", 3, index=False), {"target_rows_per_fragment": 100_000})
    assert all(t.rows + t.deleted_rows <= 95 for t in rows.selected)


def test_io_bounded_needs_a_budget(tmp_path):
    ds = random_layout(tmp_path / "t.lance", 1)
    with pytest.raises(Exception, match="io_bounded needs a budget"):
        get_planner("io_bounded", "t").plan(ds, {})


# ---- through Spark ----

def make(warehouse, name, fragments=80, rows=40):
    from oracle import degraded_table
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path), fragments=fragments, rows_per_fragment=rows, appends=4)
    return f"db.{name}", path


def test_plan_compaction_writes_nothing_and_matches_what_compact_does(spark, warehouse):
    table, path = make(warehouse, "planned")
    version = lance.dataset(str(path)).version
    before = lance.dataset(str(path))
    planned = plan_compaction(spark, table, target_rows_per_fragment=500).collect()
    assert lance.dataset(str(path)).version == version
    assert planned and all(p.selected and p.reason for p in planned)
    r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 500)").collect()[0]
    after = lance.dataset(str(path))
    gone = {f.fragment_id for f in before.get_fragments()} - {f.fragment_id for f in after.get_fragments()}
    assert gone == {i for p in planned for i in p.fragment_ids}
    assert r.tasks == len(planned)
    assert r.fragments_added == sum(p.expected_output_fragments for p in planned)
    assert r.rows_rewritten == sum(p.rows for p in planned)
    assert r.deleted_rows_removed == sum(p.deleted_rows for p in planned)
    assert r.bytes_read == sum(p.bytes for p in planned)
    assert content(after) == content(before)


def test_io_bounded_runs_converge_to_the_default_layout(spark, warehouse, tmp_path):
    table, path = make(warehouse, "bounded", fragments=120)
    reference = tmp_path / "ref.lance"
    shutil.copytree(path, reference)
    lance.dataset(str(reference)).optimize.compact_files(target_rows_per_fragment=400)
    before = lance.dataset(str(path))
    runs = []
    for _ in range(20):
        r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 400, "
                      "strategy => 'io_bounded', options => map('max_rewrite_fragments', '30'))").collect()[0]
        runs.append((r.tasks, r.fragments_removed, r.tasks_left, len(lance.dataset(str(path)).get_fragments())))
        assert r.fragments_removed <= 30
        if r.tasks == 0 and r.tasks_left == 0:
            break
    assert runs[-1][0] == 0 and runs[-1][2] == 0, runs
    assert len(runs) > 2  # the budget really split the work
    after = lance.dataset(str(path))
    assert sorted(f.count_rows() for f in after.get_fragments()) == \
        sorted(f.count_rows() for f in lance.dataset(str(reference)).get_fragments())
    assert content(after) == content(before)


def test_deletion_only_and_incremental_through_call(spark, warehouse):
    table, path = make(warehouse, "streamed")
    before = lance.dataset(str(path))
    clean = {f.fragment_id for f in before.get_fragments() if not f.metadata.deletion_file}
    r = spark.sql(f"CALL lance.compact(table => '{table}', strategy => 'deletion_only')").collect()[0]
    mid = lance.dataset(str(path))
    assert r.strategy == "deletion_only" and r.tasks >= 1
    assert clean <= {f.fragment_id for f in mid.get_fragments()}
    assert content(mid) == content(before)

    # Streaming goes on; incremental (since the compaction just recorded) touches only that.
    untouched = {f.fragment_id for f in mid.get_fragments()}
    ds = lance.write_dataset(batch(50_000, 30, dim=8), str(path), mode="append", max_rows_per_file=10)
    r = spark.sql(f"CALL lance.compact(table => '{table}', strategy => 'incremental')").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks == 1 and r.fragments_removed == 3
    assert untouched <= {f.fragment_id for f in after.get_fragments()}
    assert content(after) == content(ds)
    # An explicit since_version picks the strategy by itself.
    r = spark.sql(f"CALL lance.compact(table => '{table}', since_version => {before.version})").collect()[0]
    assert r.strategy == "incremental"


def test_describe_layout_and_histogram(spark, warehouse):
    table, path = make(warehouse, "described")
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", index_type="BTREE")
    lance.write_dataset(batch(90_000, 20, dim=8), str(path), mode="append", max_rows_per_file=10)
    ds = lance.dataset(str(path))
    facts = layout(ds)
    d = describe_layout(spark, table, target_rows_per_fragment=39).collect()[0]
    assert d.version == ds.version and d.fragments == facts["fragments"] == len(d.fragment_rows)
    assert d.rows == facts["rows"] and d.deleted_rows == facts["deleted_rows"]
    assert list(d.fragment_rows) == facts["rows_per_fragment"]
    assert d.small_fragments == sum(1 for r in facts["rows_per_fragment"] if r < 39)
    assert d.fragments_with_deletions == facts["fragments_with_deletions"]
    assert d.bytes == sum(x.file_size_bytes for f in ds.get_fragments() for x in f.metadata.files)
    assert [(i.name, i.unindexed_fragments) for i in d.indices] == [("id_idx", 2)]
    assert d.last_compacted_version is None

    # restore_indices off: the appended fragments stay unindexed (else the run's index restore is its last commit)
    r = spark.sql(f"CALL lance.compact(table => '{table}', options => map('restore_indices', 'false'))").collect()[0]
    after = describe_layout(spark, table).collect()[0]
    # Lance's Rewrite transaction is the record: no commit of ours after it.
    assert after.last_compacted_version == r.new_version == after.version
    assert after.last_compaction == f"{r.fragments_removed} fragments -> {r.fragments_added}"
    assert after.last_compacted_at
    h = FragmentHistogram.of(d, after)
    counts = dict(h.counts())
    assert sum(counts[f"version {d.version}"]) == d.fragments
    assert sum(counts[f"version {after.version}"]) == after.fragments
    svg = h._repr_svg_()
    assert svg.startswith("<svg") and svg.count('class="bar"') == 2 * len(h.buckets)
    # The PySpark cleanup function, as a dry run: nothing removed, the version kept.
    dry = cleanup(spark, table, older_than="0 seconds", dry_run=True).collect()[0]
    assert dry.dry_run and dry.old_versions >= 1 and dry.version == lance.dataset(str(path)).version
    assert len(lance.dataset(str(path)).versions()) == dry.version


def test_only_strategies_the_operator_registered_are_loaded(spark, warehouse, tmp_path):
    """A dotted name in SQL is never imported; a SET cannot register one; the name the
    operator registered (conftest.STRATEGIES, in the session's static conf) works."""
    from conftest import ROOT, refused

    table, path = make(warehouse, "registered")
    marker = tmp_path / "imported"
    probe = ROOT / "tests" / "strategy_import_probe.py"  # on the engine's path (PYTHONPATH)
    probe.write_text("import pathlib\n"
                     f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
                     "from my_planners import SkipNewest as Probe\n")
    try:
        for name in ["strategy_import_probe.Probe", "os.system"]:
            with refused(path, f"unknown strategy '{name}'; valid strategies are: default, "
                               "deletion_only, incremental, io_bounded, skip_newest .*"
                               r"spark.sql.catalog.lance.strategies.<name> = module.Class"):
                spark.sql(f"CALL lance.compact(table => '{table}', strategy => '{name}')").collect()
        spark.sql("SET spark.sql.catalog.lance.strategies.probe = strategy_import_probe.Probe")
        try:
            with refused(path, "unknown strategy 'probe'"):
                spark.sql(f"CALL lance.compact(table => '{table}', strategy => 'probe')").collect()
        finally:
            spark.sql("RESET spark.sql.catalog.lance.strategies.probe")
        assert not marker.exists()  # nothing was imported
    finally:
        probe.unlink()
    # Registered: by its name, and (the operator's own class) by its module.Class.
    before = lance.dataset(str(path))
    for name in ["skip_newest", "my_planners.SkipNewest"]:
        r = plan_compaction(spark, table, strategy=name, target_rows_per_fragment=300).collect()
        newest = sorted(f.fragment_id for f in before.get_fragments())[-10:]
        planned = {i for t in r if t.selected for i in t.fragment_ids}
        assert planned and not planned & set(newest)
