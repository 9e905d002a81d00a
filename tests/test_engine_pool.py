"""One statement, one worker (issue 42): the driver's engine pool (EnginePool.scala).

A real PySpark session (local[2]) whose pool holds at most 2 workers, 1 kept spare, each
replaced after 8 statements, every rewrite and index build as Spark tasks (as on a
cluster). Statements are slowed only through the test hook
``test_task_sleep_ms`` (this process enables test hooks, as the suite does). What is checked:
the plugin starts a worker before the first statement; statements at the same time run in
different worker processes and the quick one answers while the slow one runs; a third waits for
a free worker, then runs; a statement prefers the worker that last read its table; a worker is
replaced after its statements; an index build's Spark tasks run in Python workers of their own
at a lower CPU priority, ordinary tasks at the usual one; every table's rows are exact (pylance
reads them)."""
from __future__ import annotations

import os
import re
import threading
import time

import lance
import pytest

from conftest import wait_for
from engine_pool import leased_pids, pool, workers
from oracle import batch, content
import writers

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"  # test hooks exist only in processes started so
MAX_STATEMENTS = 8
WAIT_TIMEOUT_S = 15
SPARK_CONF = {"spark.lance.compact.engine.workers": "2", "spark.lance.compact.engine.spareWorkers": "1",
              "spark.lance.compact.engine.maxStatements": str(MAX_STATEMENTS),
              "spark.lance.compact.engine.waitTimeout": f"{WAIT_TIMEOUT_S}s",
              # every rewrite and index build as Spark tasks (as on a cluster)
              "spark.lance.compact.engineRewrite.maxBatchBytes": "0"}


@pytest.fixture(scope="module")
def spark(warehouse, tmp_path_factory):
    from conftest import logged_session

    session = logged_session(warehouse, tmp_path_factory, "lance-compact-engine-pool", SPARK_CONF)
    yield session
    session.stop()


def small_table(warehouse, name: str, fragments: int = 6) -> str:
    uri = str(warehouse / "db" / f"{name}.lance")
    for i in range(fragments):
        lance.write_dataset(batch(i * 10, 10), uri, mode="append" if i else "create")
    return uri


def compact_sql(name: str, held: bool = False) -> str:
    """A compaction; ``held``: it waits before its commit until the test releases it
    (writers.mark_then_hold, a test hook)."""
    hook = ", options => map('test_before_commit', 'writers.mark_then_hold')" if held else ""
    return f"CALL lance.compact(table => 'db.{name}', target_rows_per_fragment => 1000{hook})"


def wait_held(uri: str) -> None:
    wait_for(lambda: os.path.exists(writers.at_commit(uri)), timeout=120)


class Running:
    """A statement on a thread of its own; when it answered."""

    def __init__(self, spark, sql: str, progress_key: str | None = None, group: str | None = None,
                 tag: str | None = None) -> None:
        self.result, self.error, self.ended = None, None, None
        self.thread = threading.Thread(target=self._run, args=(spark, sql, progress_key, group, tag), daemon=True)
        self.thread.start()

    def _run(self, spark, sql: str, progress_key: str | None, group: str | None, tag: str | None) -> None:
        if progress_key:  # as the PySpark API's progress line does (progress_line.py)
            spark.sparkContext.setLocalProperty("lance_compact.progress", progress_key)
        if group:
            spark.sparkContext.setJobGroup(group, group)
        if tag:
            spark.sparkContext.addJobTag(tag)
        try:
            self.result = spark.sql(sql).collect()
        except Exception as e:  # noqa: BLE001 - shown by the test
            self.error = e
        self.ended = time.monotonic()

    def join(self, timeout: float = 120) -> "Running":
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the statement did not answer"
        assert self.error is None, self.error
        return self


def test_the_plugin_starts_a_worker_before_the_first_statement(spark):
    # no statement has run in this session yet: the plugin's warm-up started the spare
    wait_for(lambda: any(w["served"] == 0 and not w["leased"] for w in workers(spark)), timeout=60)
    wait_for(lambda: "engine ready (pid" in spark.engine_log.read_text(), timeout=10)


def test_statements_at_once_run_in_workers_of_their_own(spark, warehouse):
    slow_uri, quick_uri = small_table(warehouse, "slow"), small_table(warehouse, "quick")
    expected = {u: content(lance.dataset(u)) for u in (slow_uri, quick_uri)}
    slow = Running(spark, compact_sql("slow", held=True))
    wait_held(slow_uri)
    [slow_pid] = leased_pids(spark)
    Running(spark, compact_sql("quick")).join()
    # the quick one answered while the slow one was held, in another process
    assert slow.ended is None, "the held statement ended"
    assert [w for w in workers(spark) if w["table"] == quick_uri and w["pid"] != slow_pid]
    assert writers.release(slow_uri)
    slow.join()
    for uri in (slow_uri, quick_uri):
        ds = lance.dataset(uri)
        assert content(ds) == expected[uri] and len(ds.get_fragments()) == 1
    # each worker's log lines carry its pid: two processes served
    served = set(re.findall(r"\[(\d+)\] lance_compact\.engine: served compact", spark.engine_log.read_text()))
    assert len(served) >= 2, served


def test_a_statement_waits_for_a_free_worker_when_all_are_leased(spark, warehouse):
    names = ["wait_a", "wait_b", "wait_c"]
    uris = {n: small_table(warehouse, n) for n in names}
    expected = {n: content(lance.dataset(u)) for n, u in uris.items()}
    first = [Running(spark, compact_sql(n, held=True)) for n in names[:2]]
    for n in names[:2]:
        wait_held(uris[n])
    third = Running(spark, compact_sql(names[2]), progress_key="third")
    wait_for(lambda: pool(spark).queued() == 1, timeout=30)  # both workers leased: it waits its turn
    line = spark._jvm.io.github.lancecompact.spark.engine.Progress.line("third")
    assert line.startswith("waiting for a free engine worker: all 2 serve other statements (0 waiting before it"), line
    time.sleep(1)
    # no third statement beyond the size: the reserve worker (started now) serves only a short
    # statement or a user holding none, and this user holds both
    assert third.ended is None and len(leased_pids(spark)) == 2 and len(workers(spark)) <= 3, workers(spark)
    assert writers.release(uris["wait_a"])
    first[0].join()
    third.join()  # it ran once a worker was free
    assert writers.release(uris["wait_b"])
    first[1].join()
    for n, u in uris.items():
        assert content(lance.dataset(u)) == expected[n]
    assert pool(spark).queued() == 0


def test_a_statement_prefers_the_worker_that_last_read_its_table(spark, warehouse):
    a, b = small_table(warehouse, "aff_a"), small_table(warehouse, "aff_b")
    # one worker reads a while the other reads b: each worker's last table is its own
    slow = Running(spark, compact_sql("aff_a", held=True))
    wait_held(a)
    Running(spark, compact_sql("aff_b")).join()
    assert writers.release(a)
    slow.join()
    by_table = {w["table"]: w["pid"] for w in workers(spark)}
    assert set(by_table) >= {a, b} and by_table[a] != by_table[b], workers(spark)
    # a was released last (the most recently used worker), yet b's statement goes to b's worker
    for name, uri, other in (("aff_b", b, a), ("aff_a", a, b), ("aff_a", a, b), ("aff_b", b, a)):
        before = {w["pid"]: w["served"] for w in workers(spark)}
        if by_table[uri] not in before or by_table[other] not in before:
            break  # one of them was replaced after its statements (the next test's subject)
        spark.sql(f"SELECT count(*) FROM lance.db.{name}").collect()
        after = {w["pid"]: w["served"] for w in workers(spark)}
        # the other table's worker served nothing (a worker that serves its last statement is replaced)
        assert after.get(by_table[other]) == before[by_table[other]], (name, before, after)


def test_a_statement_on_a_new_table_goes_to_a_warm_worker_before_a_spare(spark, warehouse):
    """A spare that never served waits behind the workers that did (their Lance caches and code
    paths are warm), even when it came up after them."""
    second = small_table(warehouse, "warm_b")
    for attempt in range(3):  # a worker that served its last statement is replaced: try again
        first = small_table(warehouse, f"warm_a{attempt}")
        spark.sql(compact_sql(f"warm_a{attempt}")).collect()
        found = [w for w in workers(spark) if w["table"] == first]
        if found and found[0]["served"] + 1 < MAX_STATEMENTS:
            break
    [served] = found
    # the pool tops its spare up after the lease: wait until a never-used one is free beside it
    wait_for(lambda: any(w["served"] == 0 and not w["leased"] for w in workers(spark)), timeout=60)
    spare = next(w["pid"] for w in workers(spark) if w["served"] == 0)
    assert served["pid"] in {w["pid"] for w in workers(spark)}, workers(spark)
    spark.sql(compact_sql("warm_b")).collect()
    now = {w["pid"]: w for w in workers(spark)}
    assert now[served["pid"]]["table"] == second and now[served["pid"]]["served"] == served["served"] + 1, now
    assert now[spare]["served"] == 0, now


def test_a_worker_is_replaced_after_its_statements(spark, warehouse):
    uri = small_table(warehouse, "renewed", fragments=2)
    pids = set()
    for _ in range(2 * MAX_STATEMENTS + 1):
        spark.sql("SELECT count(*) FROM lance.db.renewed").collect()
        pids.update(w["pid"] for w in workers(spark) if w["table"] == uri)
    assert len(pids) >= 2, pids  # the worker that served it was replaced by another
    assert all(w["served"] < MAX_STATEMENTS for w in workers(spark)), workers(spark)


def test_a_short_statement_is_served_while_long_ones_hold_every_worker(spark, warehouse):
    """Both workers hold a compaction (held before its commit): a metadata read is served by the
    pool's reserve worker at once, not after them; a third compaction of the same user is not
    (it waits its turn) and, waiting past spark.lance.compact.engine.waitTimeout, fails saying so,
    having run nothing; the held ones then finish with their rows exact."""
    names = ["full_a", "full_b", "full_c"]
    uris = {n: small_table(warehouse, n) for n in names}
    expected = {n: content(lance.dataset(u)) for n, u in uris.items()}
    before_c = lance.dataset(uris["full_c"]).version
    held = [Running(spark, compact_sql(n, held=True)) for n in names[:2]]
    for n in names[:2]:
        wait_held(uris[n])
    third = Running(spark, compact_sql("full_c"))
    wait_for(lambda: pool(spark).queued() == 1, timeout=30)
    started = time.monotonic()
    rows = spark.sql("SELECT `table`, fragments FROM lance.system.table_health "
                     "WHERE namespace = 'db' AND `table` = 'full_c'").collect()
    took = time.monotonic() - started
    assert [tuple(r) for r in rows] == [("full_c", 6)], rows
    assert took < 20, f"the short statement took {took:.1f} s beside two held compactions"
    assert all(r.ended is None for r in held) and third.ended is None
    third.thread.join(WAIT_TIMEOUT_S + 60)
    assert third.ended is not None and third.error is not None, "the waiting statement did not fail"
    said = str(third.error)
    assert "LANCE_CANCELLED" in said and "spark.lance.compact.engine.waitTimeout" in said, said
    assert "nothing ran and nothing was committed" in said, said
    assert lance.dataset(uris["full_c"]).version == before_c
    for n in names[:2]:
        assert writers.release(uris[n])
    for r in held:
        r.join()
    for n in names[:2]:
        ds = lance.dataset(uris[n])
        assert content(ds) == expected[n] and len(ds.get_fragments()) == 1
    assert pool(spark).queued() == 0
    # the pool is back to its size once it is no longer full (the reserve left)
    wait_for(lambda: len(workers(spark)) <= 2, timeout=30)


def test_a_cancel_of_a_waiting_statements_group_or_tag_stops_it_before_it_runs(spark, warehouse):
    """Both workers hold a compaction; two more wait for a worker, one in a job group, one with a
    job tag. Spark posts no event a worker could see for a cancel of a group or tag with no job
    (the attack review: such a cancel was lost, and the statement later ran and committed): the
    pool watches waiting statements, so each fails at once as cancelled, having run nothing, and
    neither table changes after the held ones finish."""
    names = ["queue_a", "queue_b", "queue_c", "queue_d"]
    uris = {n: small_table(warehouse, n) for n in names}
    before = {n: lance.dataset(uris[n]).version for n in names[2:]}
    held = [Running(spark, compact_sql(n, held=True)) for n in names[:2]]
    for n in names[:2]:
        wait_held(uris[n])
    by_group = Running(spark, compact_sql("queue_c"), group="queued-statement")
    by_tag = Running(spark, compact_sql("queue_d"), tag="queued-tag")
    wait_for(lambda: pool(spark).queued() == 2, timeout=30)
    spark.sparkContext.cancelJobGroup("queued-statement")
    spark.sparkContext.cancelJobsWithTag("queued-tag")
    for waiting, n in ((by_group, "queue_c"), (by_tag, "queue_d")):
        waiting.thread.join(30)
        assert waiting.ended is not None and waiting.error is not None, "the cancel of a waiting statement was lost"
        said = str(waiting.error)
        assert "LANCE_CANCELLED" in said and "while it waited for an engine worker" in said, said
        assert f"table db.{n}: compact was cancelled" in said, said  # the pool's errors name the table too
        assert "nothing ran and nothing was committed" in said, said
    assert pool(spark).queued() == 0
    for n in names[:2]:
        assert writers.release(uris[n])
    for r in held:
        r.join()
    time.sleep(1)  # a lost cancel's statement would have run by now
    assert {n: lance.dataset(uris[n]).version for n in names[2:]} == before


def _descendants(root: int) -> set[int]:
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            parents[int(pid)] = int(stat[stat.rfind(")") + 2:].split()[1])
        except OSError:
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _python_workers(jvm_pid: int) -> dict[int, tuple[bool, set[int]]]:
    """The Python worker processes of this session's JVM (its executors' in local mode): pid ->
    (started for background tasks, the niceness of each of its threads)."""
    found = {}
    for pid in map(str, _descendants(jvm_pid)):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
            if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            nices = set()
            for tid in os.listdir(f"/proc/{pid}/task"):
                stat = open(f"/proc/{pid}/task/{tid}/stat").read()
                nices.add(int(stat[stat.rfind(")") + 2:].split()[16]))
        except OSError:  # it ended meanwhile
            continue
        found[int(pid)] = (b"LANCE_COMPACT_BACKGROUND_TASKS=10" in env, nices)
    return found


def test_index_segments_run_at_a_lower_priority_than_other_tasks(spark, warehouse):
    import numpy as np
    import pyarrow as pa

    uri = str(warehouse / "db" / "vectors.lance")
    vectors = np.random.default_rng(3).standard_normal((400, 8), dtype=np.float32)
    for i in range(4):
        part = vectors[i * 100:(i + 1) * 100]
        lance.write_dataset(pa.table({"id": pa.array(range(i * 100, (i + 1) * 100), pa.int64()),
                                      "v": pa.FixedSizeListArray.from_arrays(pa.array(part.reshape(-1)), 8)}),
                            uri, mode="append" if i else "create")
    row = spark.sql("CALL lance.create_index(table => 'db.vectors', column => 'v', index_type => 'IVF_FLAT', "
                    "name => 'v_idx', options => map('num_partitions', '2'))").collect()[0]
    assert row.built_by == "spark tasks", row
    events = small_table(warehouse, "ordinary")
    expected = content(lance.dataset(events))
    assert spark.sql(compact_sql("ordinary")).collect()[0].fragments_added == 1  # a Spark job too
    assert content(lance.dataset(events)) == expected
    workers_now = _python_workers(spark._jvm.java.lang.ProcessHandle.current().pid())
    background = [nices for bg, nices in workers_now.values() if bg]
    ordinary = [nices for bg, nices in workers_now.values() if not bg]
    # the workers that ran a segment lowered every thread to 10 (never raised one: a session
    # started at a lower priority, e.g. pytest under nice 19, keeps its own); the daemon that
    # forks them did not
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert any(nices == {max(10, base)} for nices in background), (base, workers_now)
    assert ordinary and all(nices == {base} for nices in ordinary), (base, workers_now)
    assert lance.dataset(uri).describe_indices()[0].name == "v_idx"
