"""Safety: partial progress, conflicts with concurrent writers, faults, cleanup.
Tasks get 3 attempts here (local[2,3]) so that killed workers can be retried."""
import os
import shutil
import subprocess
import time

import lance
import pytest

from conftest import NO_CLEANUP_FLOOR, ROOT, compact_call, degraded_table_for
from oracle import batch, content, degraded_table, says_committed

SPARK_MASTER = "local[2,3]"
SPARK_CONF = NO_CLEANUP_FLOOR  # the operator allows cleanup of orphans of any age (tests below)


@pytest.fixture
def table(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=60)


call = compact_call


def planned(spark, table):
    return len(spark.sql(f"CALL lance.plan_compaction(table => '{table}', "
                         "target_rows_per_fragment => 300)").collect())


def ids(ds) -> set[int]:
    return set(ds.to_table(columns=["id"])["id"].to_pylist())


def data_files(path):
    return sorted(os.listdir(path / "data"))


def compact_once(spark, table, args: str | None = None, plan: bool = False):
    """The arrange-act of the tests here: (the table before, the number of tasks planned when
    ``plan``, the CALL's metrics row, the table after)."""
    t, path = table
    before = lance.dataset(str(path))
    n = planned(spark, t) if plan else None
    r = call(spark, t, args) if args else call(spark, t)
    return before, n, r, lance.dataset(str(path))


def test_partial_progress_commits_in_groups(spark, table):
    before, n, r, after = compact_once(spark, table, "partial_progress => true, max_commits => 3", plan=True)
    assert n > 3 and r.tasks == n and r.commits == 3 and r.tasks_failed == 0
    assert r.new_version == after.version
    assert content(after) == content(before)


def test_partial_progress_counts_a_failing_task_and_lands_the_rest(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    plan = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 300)").collect()
    r = call(spark, t, "partial_progress => true, max_commits => 2, "
                       "options => map('test_fail_task', '1:all:raise')")
    after = lance.dataset(str(path))
    assert r.tasks_failed == 1 and r.tasks == len(plan) - 1 and r.commits == 2
    kept = set(plan[1].fragment_ids)
    assert kept <= {f.fragment_id for f in after.get_fragments()}  # the failed task's fragments stay
    assert content(after) == content(before)


def test_partial_progress_survives_a_worker_killed_on_every_attempt(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    r = call(spark, t, "partial_progress => true, max_commits => 1, "
                       "options => map('test_fail_task', '0:all:kill')")
    assert r.tasks_failed == 1 and r.tasks >= 1 and r.commits == 1
    assert content(lance.dataset(str(path))) == content(before)


def test_a_killed_worker_is_retried_by_spark(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    n = planned(spark, t)
    r = call(spark, t, "options => map('test_fail_task', '0:0:kill')")
    assert r.tasks == n and r.tasks_failed == 0 and r.commits == 1
    assert content(lance.dataset(str(path))) == content(before)


def test_a_task_failing_every_attempt_fails_the_call_and_changes_nothing(spark, table):
    t, path = table
    version, files = lance.dataset(str(path)).version, data_files(path)
    n = planned(spark, t)
    with pytest.raises(Exception, match="injected failure of task 2") as e:
        call(spark, t, "options => map('test_fail_task', '2:all:raise')")
    # an error no rule names (a RuntimeError) is ours to look at, not the user's bad input
    assert "[LANCE_INTERNAL_ERROR]" in str(e.value) and "please report it" in str(e.value), str(e.value)
    assert lance.dataset(str(path)).version == version
    # What finished tasks wrote is removed on abort; a task Spark cancelled mid-write may
    # leave a file behind, which cleanup removes.
    deadline = time.time() + 60
    while data_files(path) != files:
        assert time.time() < deadline, set(data_files(path)) - set(files)
        spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                  "delete_unverified => true, unverified_min_age => '0 seconds')").collect()
        time.sleep(1)
    assert call(spark, t).tasks == n  # and the next CALL succeeds


def test_a_concurrent_delete_is_carried_over_onto_the_new_fragments(spark, table):
    t, path = table
    before, n, r, after = compact_once(spark, table,
        "options => map('test_before_commit', 'writers.delete_in_first_fragment')", plan=True)
    # the untouched tasks commit as planned, the touched one with the delete carried over
    assert r.tasks == n and r.tasks_rebased == 1 and r.retries == 0 and r.commits == 2
    gone = ids(before) - ids(after)
    assert len(gone) == 5  # the concurrent delete, not undone, nothing else lost
    assert after.count_rows() == before.count_rows() - 5
    assert call(spark, t).tasks == 0  # fully compacted


def test_without_carrying_over_the_touched_task_is_replanned(spark, table):
    t, path = table
    before, _, r, after = compact_once(spark, table,
        "options => map('test_before_commit', 'writers.delete_in_first_fragment', "
        "'carry_over_deletes', 'false')")
    assert r.retries == 1 and r.tasks_conflicted == 0 and r.tasks_rebased == 0 and r.commits == 2
    assert after.count_rows() == before.count_rows() - 5
    assert call(spark, t).tasks == 0  # fully compacted after the retry


def test_without_retries_conflicted_tasks_are_dropped_not_forced(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    files = len(data_files(path))
    n = planned(spark, t)
    r = call(spark, t, "max_retries => 0, options => map('carry_over_deletes', 'false', "
                       "'test_before_commit', 'writers.delete_in_first_fragment')")
    after = lance.dataset(str(path))
    assert r.retries == 0 and r.tasks_conflicted == 1 and r.tasks == n - 1 and r.commits == 1
    assert after.count_rows() == before.count_rows() - 5
    # the conflicted task's new file was removed: one new data file per committed task
    assert len(data_files(path)) == files + n - 1


def test_a_delete_touching_every_fragment_before_every_commit_still_lands(spark, table):
    before, n, r, after = compact_once(spark, table,
        "options => map('test_before_commit', 'writers.delete_everywhere')", plan=True)
    assert r.tasks == n and r.tasks_rebased == n and r.retries == 0 and r.tasks_conflicted == 0
    assert len(after.get_fragments()) < len(before.get_fragments())
    deleted = set(x for x in ids(before) if x % 97 == 0)
    assert ids(after) == ids(before) - deleted


def test_retries_are_bounded_under_endless_conflicts(spark, table):
    t, path = table
    before, _, r, after = compact_once(
        spark, table, "max_retries => 2, options => map('test_before_commit', 'writers.delete_everywhere', "
        "'carry_over_deletes', 'false')")
    assert r.retries == 2 and r.tasks_conflicted >= 1 and r.tasks == 0
    deleted = set(x for x in ids(before) if x % 97 in (0, 1, 2))
    assert ids(after) == ids(before) - deleted


def test_a_concurrent_append_is_compatible(spark, table):
    before, n, r, after = compact_once(spark, table,
        "options => map('test_before_commit', 'writers.append_rows')", plan=True)
    assert r.retries == 0 and r.commits == 1 and r.tasks == n
    assert after.count_rows() == before.count_rows() + 25


def test_an_incompatible_overwrite_fails_clearly_and_stands(spark, table):
    t, path = table
    with pytest.raises(Exception, match="a concurrent Overwrite by another writer is incompatible with "
                                        "compaction .*; nothing was committed"):
        call(spark, t, "options => map('test_before_commit', 'writers.overwrite')")
    after = lance.dataset(str(path))
    assert after.count_rows() == 10 and min(after.to_table()["id"].to_pylist()) == 700_000


def test_driver_killed_before_commit_then_cleanup(spark, table, warehouse):
    """The spark-sql driver dies between rewrite and commit: the table is unchanged, the next
    CALL succeeds, and cleanup removes the orphaned files (dry run first)."""
    t, path = table
    before = lance.dataset(str(path))
    files = data_files(path)
    n = planned(spark, t)
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "-e", f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
               "options => map('test_kill_driver_before_commit', 'true'))"],
        capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    assert lance.dataset(str(path)).version == before.version
    orphans = set(data_files(path)) - set(files)
    assert len(orphans) == n  # the rewrite happened, the commit never did

    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                    "delete_unverified => true, unverified_min_age => '0 seconds', dry_run => true)").collect()[0]
    assert dry.dry_run and dry.data_files_removed >= n and set(data_files(path)) >= orphans
    r = call(spark, t)
    assert r.tasks == n and r.read_version == before.version
    after = lance.dataset(str(path))
    assert content(after) == content(before)
    done = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                     "delete_unverified => true, unverified_min_age => '0 seconds')").collect()[0]
    assert not done.dry_run and done.old_versions >= 1 and done.data_files_removed >= n + 60
    assert not (set(data_files(path)) & orphans)
    assert content(lance.dataset(str(path))) == content(after)


@pytest.mark.parametrize("args,message", [
    ("since_version => 999", "since_version 999 is newer than the table's version"),
    ("older_than_what => 1", "UNRECOGNIZED_PARAMETER_NAME"),
])
def test_more_bad_input(spark, table, args, message):
    t, path = table
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=message):
        spark.sql(f"CALL lance.compact(table => '{t}', {args})").collect()
    assert lance.dataset(str(path)).version == version


def test_a_cleaned_up_version_is_reported(spark, table):
    t, path = table
    first = lance.dataset(str(path)).version
    call(spark, t)
    spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds')").collect()
    version = lance.dataset(str(path)).version
    with pytest.raises(Exception, match=f"since_version {first - 1} no longer exists"):
        spark.sql(f"CALL lance.compact(table => '{t}', since_version => {first - 1})").collect()
    assert lance.dataset(str(path)).version == version
    with pytest.raises(Exception, match="older_than expects"):
        spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => 'a while')").collect()


@pytest.mark.parametrize("empty", ["no rows", "all deleted"])
def test_empty_tables_are_reported(spark, warehouse, empty):
    path = warehouse / "db" / "empty.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=5, rows_per_fragment=10, delete_every=0)
    if empty == "no rows":
        ds = lance.write_dataset(ds.to_table().slice(0, 0), str(path), mode="overwrite")
    else:
        ds.delete("true")
    version = lance.dataset(str(path)).version
    for procedure in ("compact", "plan_compaction"):
        with pytest.raises(Exception, match=f"table db.empty: the table is empty at version {version}"):
            spark.sql(f"CALL lance.{procedure}(table => 'db.empty')").collect()
    assert lance.dataset(str(path)).version == version
    # The layout report still describes it.
    assert spark.sql("CALL lance.describe_layout(table => 'db.empty')").collect()[0].rows == 0


def test_two_compactions_at_once_neither_loses_nor_duplicates(spark, table, tmp_path):
    """Two CALLs on the same table at the same time (two threads, one session): whichever
    commits second sees the conflict, commits what is safe and re-plans the rest."""
    import threading

    t, path = table
    before = lance.dataset(str(path))
    reference = tmp_path / "ref.lance"
    shutil.copytree(path, reference)
    lance.dataset(str(reference)).optimize.compact_files(target_rows_per_fragment=300)
    results, errors = [], []

    def run():
        try:
            results.append(call(spark, t))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    # One commits; the other either conflicts and re-plans to nothing, or plans after it.
    assert sorted(r.commits for r in results) == [0, 1]
    assert all(r.tasks_conflicted == 0 for r in results)
    after = lance.dataset(str(path))
    assert content(after) == content(before)
    assert call(spark, t).tasks == 0
    assert sorted(f.count_rows() for f in after.get_fragments()) == \
        sorted(f.count_rows() for f in lance.dataset(str(reference)).get_fragments())
    assert sum(r.fragments_removed for r in results) >= len(before.get_fragments()) - len(after.get_fragments())


def test_cleanup_spares_a_writers_files_younger_than_the_bound(spark, table):
    """delete_unverified removes files no version references only once they are older than
    unverified_min_age (here '1 hour'; the operator's floor is 0 in this module): a writer's files written before its commit survive,
    even when another commit landed in between (pylance's own delete_unverified removes those)."""
    from lance.fragment import write_fragments

    t, path = table
    ds = lance.dataset(str(path))
    # What a concurrent writer leaves before its commit: a deletion file and a data file.
    frag = next(f for f in ds.get_fragments() if f.metadata.deletion_file is None)
    frag.delete_rows([0])
    new = write_fragments(ds.to_table(limit=5), str(path), max_rows_per_file=5)
    young_data = {f.path for m in new for f in m.files}
    referenced = {f.fragment_id for f in ds.get_fragments() if f.metadata.deletion_file}

    def orphan_deletions():
        return {n for n in os.listdir(path / "_deletions") if int(n.split("-")[0]) not in referenced}

    young_deletions = orphan_deletions()
    assert len(young_deletions) == 1 and len(young_data) == 1
    lance.write_dataset(ds.to_table(limit=3), str(path), mode="append")  # another commit lands
    before = content(lance.dataset(str(path)))

    r = spark.sql(f"CALL lance.cleanup(table => '{t}', older_than => '0 seconds', "
                  "delete_unverified => true, unverified_min_age => '1 hour')").collect()[0]
    assert r.old_versions >= 1
    assert orphan_deletions() == young_deletions and young_data <= set(data_files(path))
    # One hour old: removed, counted, and the table is unchanged.
    old = time.time() - 3700
    for name in young_deletions:
        os.utime(path / "_deletions" / name, (old, old))
    for name in young_data:
        os.utime(path / "data" / name, (old, old))
    sizes = sum(os.path.getsize(path / "_deletions" / n) for n in young_deletions) + \
        sum(os.path.getsize(path / "data" / n) for n in young_data)
    dry = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, dry_run => true, "
                    "unverified_min_age => '1 hour')").collect()[0]
    assert (dry.data_files_removed, dry.deletion_files_removed, dry.bytes_removed) == (1, 1, sizes)
    assert orphan_deletions() == young_deletions and young_data <= set(data_files(path))
    r = spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, "
                  "unverified_min_age => '1 hour')").collect()[0]
    assert (r.data_files_removed, r.deletion_files_removed, r.bytes_removed) == (1, 1, sizes)
    assert not orphan_deletions() and not (young_data & set(data_files(path)))
    assert content(lance.dataset(str(path))) == before
    # Bounds are checked before anything is removed.
    with pytest.raises(Exception, match="unverified_min_age must be at most 7 days"):
        spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, "
                  "unverified_min_age => '8 days')").collect()
    with pytest.raises(Exception, match="unverified_min_age expects"):
        spark.sql(f"CALL lance.cleanup(table => '{t}', delete_unverified => true, "
                  "unverified_min_age => 'soon')").collect()


# Issue 33: every failure says what landed (plain compaction's commit points).


def failed_call(spark, t, args):
    with pytest.raises(Exception) as e:
        call(spark, t, args)
    return str(e.value)


@pytest.mark.parametrize("fault,words", [
    ("commit:enospc", ("storage full", "no space left on the device", "not a lance_compact bug")),
    ("commit:quota", ("storage full", "object store", "507")),
])
def test_a_failed_commit_says_storage_and_leaves_no_file(spark, table, fault, words):
    """The commit itself fails (a full disk, a store's quota, as Lance raises them): the error
    names the table and the storage failure, says the commit did not land and nothing was
    committed, and the files the run wrote are gone; the next CALL compacts."""
    t, path = table
    before = lance.dataset(str(path))
    files = data_files(path)
    message = failed_call(spark, t, f"options => map('test_fail_at', '{fault}')")
    assert f"table {t}: committing failed" in message and all(w in message for w in words), message
    assert "did not land" in message and "nothing was committed" in message, message
    assert "files it wrote were removed" in message and "please report" not in message, message
    assert "LANCE_STORAGE_ERROR" in message, message  # the SQL error condition: storage, not internal
    assert lance.dataset(str(path)).version == before.version
    assert data_files(path) == files, set(data_files(path)) ^ set(files)
    assert content(lance.dataset(str(path))) == content(before)
    assert call(spark, t).commits == 1


def test_a_full_disk_in_a_task_is_a_storage_failure(spark, table):
    """A rewrite task fails every attempt with a full disk's error: a storage failure, not our
    bug; nothing committed."""
    t, path = table
    before = lance.dataset(str(path))
    message = failed_call(spark, t, "options => map('test_fail_task', '0:all:enospc')")
    assert f"table {t}:" in message and "storage full" in message and "nothing was committed" in message, message
    assert "please report" not in message, message
    assert lance.dataset(str(path)).version == before.version
    assert content(lance.dataset(str(path))) == content(before)


def _coverage(path) -> tuple[int, int]:
    ds = lance.dataset(str(path))
    frags = {f.fragment_id for f in ds.get_fragments()}
    covered = {f for ix in ds.list_indices() if ix["name"] == "id_idx" for f in ix["fragment_ids"] or []}
    return len(covered & frags), len(frags)


def test_an_index_behind_the_table_is_restored_and_a_failed_restore_names_the_versions(spark, table):
    """A BTREE that does not cover appended fragments: a compaction whose restore fails (a
    store error at the index restore) names the table and the version its Rewrite committed;
    the next compaction restores the index to the whole table and says so in its row."""
    t, path = table
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    lance.write_dataset(batch(500_000, 30), str(path), mode="append", max_rows_per_file=10)
    before = lance.dataset(str(path))
    covered, total = _coverage(path)
    assert covered < total
    message = failed_call(spark, t, "options => map('test_fail_at', 'index_restore:store')")
    after = lance.dataset(str(path))
    landed = [v["version"] for v in after.versions() if v["version"] > before.version]
    rewrite = landed[-1]
    assert f"table {t}: restoring the indices after the compaction failed: object store" in message, message
    assert says_committed(message, [rewrite]) and "the index restore did not land" in message, message
    assert "id_idx" in message, message
    assert content(after) == content(before)
    assert _coverage(path)[0] < _coverage(path)[1]
    r = call(spark, t)
    assert "id_idx: covered" in r.index_coverage and "restored by optimize_indices" in r.index_coverage, r
    assert r.new_version == lance.dataset(str(path)).version, r
    covered, total = _coverage(path)
    assert covered == total, (covered, total)
    assert content(lance.dataset(str(path))) == content(before)


def test_a_flipped_footer_byte_names_the_file_and_fragment(spark, table):
    """A byte of a data file's footer flipped: the compaction fails naming the file, its
    fragment, 'damaged' (not our bug), commits nothing and leaves no file."""
    t, path = table
    before = lance.dataset(str(path))
    fragment = before.get_fragments()[1]
    victim = fragment.data_files()[0].path
    with open(path / "data" / victim, "r+b") as f:
        f.seek(-40, os.SEEK_END)
        b = f.read(1)
        f.seek(-40, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    files = data_files(path)
    message = failed_call(spark, t, "")
    assert f"data/{victim} of fragment {fragment.fragment_id} is damaged" in message, message
    assert "LANCE_CORRUPT_FILE" in message, message
    assert f"table {t}:" in message and "nothing was committed" in message and "please report" not in message, message
    assert lance.dataset(str(path)).version == before.version
    deadline = time.time() + 30  # a task Spark stopped mid-write may still be closing its file
    while data_files(path) != files and time.time() < deadline:
        time.sleep(0.5)
    assert data_files(path) == files, set(data_files(path)) ^ set(files)


def test_a_real_full_disk_at_the_commit(spark, warehouse):
    """A real full disk: the table on a small tmpfs, filled right before the commit (the
    test_fail_at hook calls writers.fill_disk there). The error says storage full, not our bug,
    and nothing was committed (checked against the table's versions: no Rewrite landed), the
    rows are exact; once space is freed the next CALL compacts. Skipped where tmpfs cannot be
    mounted (not root)."""
    from table_files import rewrites_since
    from writers import FILLER

    path = warehouse / "db" / "fulldisk.lance"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    try:
        degraded_table(str(path), fragments=40)
        before = lance.dataset(str(path))
        message = failed_call(spark, "db.fulldisk", "options => map('test_fail_at', 'commit:writers.fill_disk')")
        assert "table db.fulldisk:" in message and "storage full" in message, message
        assert "not a lance_compact bug" in message and "please report" not in message, message
        os.remove(path / FILLER)
        after = lance.dataset(str(path))
        assert rewrites_since(after, before.version) == 0
        assert "nothing was committed" in message, message
        assert content(after) == content(before)
        r = call(spark, "db.fulldisk")
        assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)
