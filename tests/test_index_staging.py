"""An index build in the engine worker that is stopped mid-build commits nothing and leaves no
segment folder (issue 42): the folder ``_indices/<uuid>`` is staged (reported to the JVM) before
Lance writes it, and when the worker is killed (after a cancel it cannot honour inside Lance's
build, past its time limit, or by a kill from outside) the pool removes it through another worker
(``discard_staged``); ``discard_staged`` never removes what the table references.

One real PySpark session (local[2]) whose workers build even the issue's heavy IVF_HNSW_FLAT
(m 256, ef_construction 5000 on 5,000 rows: minutes of CPU) themselves
(``spark.lance.compact.index.engineMaxSeconds`` raised), with a short cancel grace (2 s) and time
limit (8 s)."""
from __future__ import annotations

import json
import os
import signal
import time

import lance
import pytest

from held_statements import Statement
from conftest import degraded_table_for, lance_session, wait_for
from engine_pool import wait_for_leased
from oracle import content

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
GRACE_S, LIMIT_S = 2, 8
ANSWER_BOUND_S = GRACE_S + 20  # the grace, the kill, the answer's way back on 2 loaded cores


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory):
    return tmp_path_factory.mktemp("engine") / "engine.log"


@pytest.fixture(scope="module")
def spark(warehouse, engine_log):
    session = lance_session("local[2]", "lance-compact-index-staging", str(warehouse),
                            {"spark.lance.compact.engine.log": str(engine_log),
                             "spark.lance.compact.engine.cancelGrace": f"{GRACE_S}s",
                             "spark.lance.compact.index.engineMaxSeconds": "1000000",
                             "spark.lance.compact.index.engineTimeout": f"{LIMIT_S}s"})
    yield session
    session.stop()


@pytest.fixture
def vectors(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=5, rows_per_fragment=1000)


def heavy(t: str) -> str:
    return (f"CREATE INDEX hnsw ON lance.{t} USING IVF_HNSW_FLAT (vector) "
            "OPTIONS (num_partitions 1, m 256, ef_construction 5000)")


def folders(path) -> set[str]:
    d = path / "_indices"
    return set(os.listdir(d)) if d.exists() else set()


def building(path, s: Statement) -> set[str]:
    """The segment folder(s) the running build has made (Lance makes its folder as it starts)."""
    return wait_for(lambda: folders(path) or (not s.thread.is_alive() and {"ended"}), timeout=240, step=0.05)


def unchanged_and_clean(path, before) -> None:
    after = lance.dataset(str(path))
    assert after.version == before.version and not after.describe_indices()
    assert content(after) == content(before)
    # the pool removes the dead worker's staged folder through another worker
    wait_for(lambda: not folders(path), timeout=60)


def test_a_cancel_mid_build_kills_the_worker_and_commits_nothing(spark, vectors):
    t, path = vectors
    before = lance.dataset(str(path))
    s = Statement(spark, heavy(t), "stage-cancel")
    made = building(path, s)
    assert "ended" not in made, f"the build ended early: {s.error}"
    time.sleep(1)
    cancelled_at = time.monotonic()
    spark.sparkContext.cancelJobGroup("stage-cancel")
    s.join(60)
    message = str(s.error)
    print(f"\ncancelled mid-build -> answered after {s.ended - cancelled_at:.2f} s: {message[:200]}")
    assert "[LANCE_CANCELLED]" in message and "was killed" in message, message
    assert "nothing was committed after the cancel" in message and "are being removed" in message, message
    assert s.ended - cancelled_at < ANSWER_BOUND_S
    unchanged_and_clean(path, before)


def test_a_build_past_its_time_limit_is_stopped(spark, vectors):
    t, path = vectors
    before = lance.dataset(str(path))
    started = time.monotonic()
    s = Statement(spark, heavy(t), "stage-limit")
    s.join(LIMIT_S + ANSWER_BOUND_S + 30)
    message = str(s.error)
    print(f"\npast the time limit -> answered after {s.ended - started:.2f} s: {message[:200]}")
    assert "[LANCE_CANCELLED]" in message and "nothing was committed after the cancel" in message, message
    assert LIMIT_S <= s.ended - started
    unchanged_and_clean(path, before)


def test_a_worker_killed_mid_build_has_its_folder_removed(spark, vectors):
    t, path = vectors
    before = lance.dataset(str(path))
    s = Statement(spark, heavy(t), "stage-kill")
    [pid] = wait_for_leased(spark)
    made = building(path, s)
    assert "ended" not in made, f"the build ended early: {s.error}"
    os.kill(pid, signal.SIGKILL)
    s.join(60)
    message = str(s.error)
    assert "[LANCE_WORKER_LOST]" in message and "it was not committing" in message, message
    assert "are being removed" in message, message
    unchanged_and_clean(path, before)


def test_discard_staged_never_removes_a_committed_file(spark, vectors):
    """The pool's action, sent as the pool sends it: an index's committed segment and a data file
    the table holds stay; an unreferenced folder goes; a path outside the forms a request stages
    is never touched."""
    t, path = vectors
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    ds = lance.dataset(str(path))
    committed = str(ds.describe_indices()[0].segments[0].uuid)
    data = ds.get_fragments()[0].metadata.files[0].path
    stray = "0bad0bad-0000-4000-8000-000000000000"
    (path / "_indices" / stray).mkdir()
    (path / "_indices" / stray / "part.lance").write_bytes(b"x")
    (path / "keep.txt").write_text("not a staged form")
    request = {"table": t, "uri": str(path), "storage_options": {},
               "discard": {str(path): [f"_indices/{committed}", f"data/{data}", f"_indices/{stray}", "keep.txt",
                                       "_indices/../keep.txt"]}}
    engine = spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession)
    answer = json.loads(engine.call("discard_staged", json.dumps(request)))
    assert answer["ok"], answer
    assert answer["rows"] == [[t, [f"_indices/{stray}"]]], answer
    assert (path / "_indices" / committed).exists() and (path / "data" / data).exists()
    assert not (path / "_indices" / stray).exists() and (path / "keep.txt").exists()
    after = lance.dataset(str(path))
    assert after.version == ds.version and content(after) == content(ds)  # every file it reads is there
    # a location the request does not name is never touched
    other = path.parent / "elsewhere"
    (other / "_indices" / stray).mkdir(parents=True)
    request["discard"] = {str(other): [f"_indices/{stray}"]}
    answer = json.loads(engine.call("discard_staged", json.dumps(request)))
    assert answer["ok"] and answer["rows"] == [], answer
    assert (other / "_indices" / stray).exists()


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _is_engine(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"lance_compact.engine" in f.read()
    except OSError:
        return False


def _session_java(sid: int) -> int | None:
    """The java process of session ``sid`` (the spark-sql driver the test started)."""
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    command = f.read().split(b"\0")[0]
                if int(fields[3]) == sid and command.endswith(b"java"):
                    return int(p)
            except (OSError, ValueError, IndexError):
                pass
    return None


def test_a_worker_whose_driver_died_removes_its_own_folder(vectors, warehouse):
    """The spark-sql driver is killed mid-build: no pool is left to remove the build's folder, so
    the worker removes what it staged before it exits (within its 10 s), then ends."""
    import subprocess
    from conftest import ROOT

    t, path = vectors
    before = lance.dataset(str(path))
    p = subprocess.Popen(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "--conf", "spark.lance.compact.index.engineMaxSeconds=1000000", "-e", heavy(t)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: folders(path) or p.poll() is not None, timeout=300, step=0.1)
        assert p.poll() is None and folders(path), "the build ended before it was killed"
        java = _session_java(p.pid)
        assert java is not None
        workers = [c for c in _children(java) if _is_engine(c)]
        assert workers
        os.kill(java, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not folders(path), timeout=120)
        print(f"\ndriver killed -> the worker's folder removed after {time.monotonic() - killed:.2f} s")
        wait_for(lambda: not any(_is_engine(w) for w in workers), timeout=120)  # and the workers ended
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
    after = lance.dataset(str(path))
    assert after.version == before.version and not after.describe_indices()


def _held_commit(uri: str):
    """A statement of this process inside the commit gate with a compaction of ``uri`` staged
    (its new data file written, Lance's commit not yet called), as a worker is when its JVM
    dies mid-commit: (its thread, the staged paths, the event that lets it commit, the results)."""
    import threading
    from lance.optimize import Compaction
    from lance_compact.runtime import cancellation, commit_gate

    ds = lance.dataset(uri)
    results = [t.execute(ds) for t in Compaction.plan(ds, {"target_rows_per_fragment": 1 << 20}).tasks]
    new = [f"data/{d.path}" for r in results for f in r.new_fragments for d in f.files]
    inside, go = threading.Event(), threading.Event()

    def statement():
        with cancellation.serving(lambda: None):  # a statement whose JVM said no cancel
            commit_gate.stage(uri, new)
            with commit_gate.committing("table t: committing a compaction", RuntimeError):
                inside.set()
                go.wait(60)
                Compaction.commit(ds, results, {"target_rows_per_fragment": 1 << 20})
            commit_gate.stage(uri, [])
            commit_gate.forget()

    t = threading.Thread(target=statement, daemon=True)
    t.start()
    assert inside.wait(30)
    return t, new, go


@pytest.mark.parametrize("wait_s", [30.0, 0.5])
def test_a_worker_whose_driver_died_never_removes_files_a_commit_under_way_lands(warehouse, request, wait_s):
    """The JVM died while a commit of the worker was under way (nothing kills the worker then):
    the worker's removal of its own staged files (the stdin watcher's remove_own) waits for that
    commit, and a commit still under way when its time is up keeps its files. Was: the files were
    removed at once and the commit landed a version whose data file was gone (reads failed
    'Not found')."""
    import threading
    from lance_compact.maintenance.staged_files import remove_own

    path = degraded_table_for(warehouse, request, fragments=4, rows_per_fragment=100)[1]
    before = content(lance.dataset(str(path)))
    t, new, go = _held_commit(str(path))
    removing = threading.Thread(target=remove_own, args=(wait_s,), daemon=True)
    removing.start()
    removing.join(wait_s + 5 if wait_s < 1 else 1.0)
    if wait_s < 1:  # its time was up first: the commit's files are left alone
        assert not removing.is_alive()
    else:  # it waits for the commit under way
        assert removing.is_alive()
    assert all((path / p).exists() for p in new)
    go.set()
    t.join(30)
    removing.join(30)
    after = lance.dataset(str(path))
    assert [f"data/{d.path}" for f in after.get_fragments() for d in f.metadata.files if f"data/{d.path}" in new]
    assert all((path / p).exists() for p in new)
    assert content(after) == before  # every file the committed version reads is there
