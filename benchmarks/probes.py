"""The benchmark's probes: each timed path, run in a process of its own (``suite.py --probe
NAME``) so that every path starts alike; and the helpers they share. ``suite.py`` runs them
and puts their figures together."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The target rows per fragment each table is compacted to.
TARGETS = {"streaming": 100_000, "big": 1_048_576, "big4x": 1_048_576, "binary": 1_048_576,
           "frags1k": 100, "frags50k": 100, "frags100k": 100_000}

# ---------------------------------------------------------------- helpers (any process)

def copy(src: Path, dst: Path) -> Path:
    """A fresh copy, written to disk before anything is timed on it."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    os.sync()
    return dst


def same_rows(a: Any, b: Any, window: int = 250_000) -> bool:
    """Whether two datasets hold the same rows in the same order (windowed, memory-bound)."""
    n = a.count_rows()
    if n != b.count_rows():
        return False
    return all(a.to_table(offset=o, limit=window).equals(b.to_table(offset=o, limit=window))
               for o in range(0, n, window))


def fragment_rows(ds: Any) -> list[int]:
    return [f.count_rows() for f in ds.get_fragments()]


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                out.append((p, f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            continue
        todo.extend(children.get(p, []))
    return out


def rss_kb(pid: int) -> int:
    """The process's resident set now (VmRSS), in KiB; 0 once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def role(cmd: str) -> str:
    """What a process of a Spark run is, by its command line: 'jvm', 'engine', 'worker'
    (Spark's Python daemon or worker) or 'other'."""
    if "java" in cmd.split(" ")[0]:
        return "jvm"
    if "lance_compact.engine" in cmd:
        return "engine"
    if any(w in cmd for w in ("pyspark.daemon", "pyspark/daemon", "pyspark.worker")):
        return "worker"
    return "other"


def roles_below(roots: list[int]) -> dict[int, str]:
    """pid -> :func:`role` of every process below any of ``roots``."""
    return {p: role(cmd) for root in roots for p, cmd in descendants(root)}


# ---------------------------------------------------------------- probes (own processes)

def probe_pylance(work: Path, table: str, options: dict, repeat: int, cores: int | None) -> dict:
    """pylance's compact_files in this process (pinned to ``cores`` CPUs when given)."""
    if cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    import lance

    src = work / "tables" / f"{table}.lance"
    source = lance.dataset(str(src))
    times, times_open, layout, metrics = [], [], None, None
    for i in range(repeat + 1):  # the first run warms this process, as the session is warmed
        dst = copy(src, work / "runs" / f"pylance-{table}.lance")
        opened = time.perf_counter()
        ds = lance.dataset(str(dst))
        t = time.perf_counter()
        m = ds.optimize.compact_files(**options)
        if i:
            times.append(time.perf_counter() - t)
            times_open.append(time.perf_counter() - opened)
        after = lance.dataset(str(dst))
        assert same_rows(after, source), f"pylance changed the rows of {table}"
        layout = fragment_rows(after)
        metrics = {"fragments_removed": m.fragments_removed, "fragments_added": m.fragments_added}
    return {"times": times, "times_open": times_open, "layout": layout, "metrics": metrics}


def _session(master: str, warehouse: Path, plugin: bool = True, conf: dict | None = None) -> Any:
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    builder = (SparkSession.builder.master(master).appName("lance-compact-benchmark")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               # the operator's: these tables' versions are seconds old (version-retention check off)
               .config("spark.lance.compact.cleanup.versionMinAge", "0s"))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = configure_spark_with_lance_compact(builder, warehouse=str(warehouse),
                                               start_engine=plugin).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def call_statement(table: str, target: int, extra: str = "", ns: str = "b") -> str:
    return f"CALL lance.compact(table => '{ns}.{table}', target_rows_per_fragment => {target}{extra})"


def _session_run(spark: Any, work: Path, wh: Path, r: dict, o: dict, i: int) -> None:
    """Run ``i`` of spec ``r`` in a warm session; its time, row and layout into ``o``."""
    import lance
    from lance_compact import compact

    table, target = r["table"], TARGETS[r["table"]]
    src = work / "tables" / f"{table}.lance"
    ns = wh.name + ".b"
    if r["kind"] == "noop":
        if i == 0:
            copy(src, wh / "b" / "noop.lance")
            spark.sql(call_statement("noop", target, ns=ns)).collect()
        t = time.perf_counter()
        row = spark.sql(call_statement("noop", target, ns=ns)).collect()[0]
        o["times"].append(time.perf_counter() - t)
        assert row.tasks == 0, "the no-op CALL did work"
        return
    if r["kind"] == "plan":  # writes nothing: the table itself, by its path
        t = time.perf_counter()
        planned = spark.sql(f"CALL lance.plan_compaction(table => '{src}', "
                            f"target_rows_per_fragment => {target})").collect()
        o["times"].append(time.perf_counter() - t)
        o["rows"].append({"tasks": len(planned), "fragments": sum(p.fragments for p in planned)})
        return
    dst = copy(src, wh / "b" / f"{table}.lance")
    t = time.perf_counter()
    if r["kind"] == "warehouse":  # the table among the namespace's (the others are compacted)
        rows = spark.sql(f"CALL lance.maintain_warehouse(namespace => '{ns}', "
                         f"target_rows_per_fragment => {target})").collect()
        row = next(x for x in rows if x.table.endswith(f".{table}") and x.step == "compact")
        assert row.ran and row.error is None, rows
    elif r["kind"] == "api":
        row = compact(spark, f"{ns}.{table}", target_rows_per_fragment=target,
                      **r.get("options", {})).collect()[0]
    else:
        opts = "".join(f", {k} => '{v}'" if isinstance(v, str) else f", {k} => {v}"
                       for k, v in r.get("options", {}).items())
        row = spark.sql(call_statement(table, target, opts, ns=ns)).collect()[0]
    o["times"].append(time.perf_counter() - t)
    after = lance.dataset(str(dst))
    assert same_rows(after, lance.dataset(str(src))), f"CALL changed the rows of {table}"
    o["layout"] = fragment_rows(after)
    o["rows"].append(row.asDict())


def probe_session(work: Path, master: str, runs: list[dict], conf: dict | None = None) -> dict:
    """A warm PySpark session (more static Spark settings: ``conf``): each run compacts fresh
    copies through SQL (``sql``) or the PySpark API (``api``), or times plan_compaction
    (``plan``) or a no-op CALL (``noop``)."""
    wh = work / f"wh_{os.getpid()}"
    (wh / "b").mkdir(parents=True, exist_ok=True)
    spark = _session(master, work, conf=conf)  # the warehouse: tables/ and the copies in <wh>/b/
    # Warm: engine and Python workers started, pylance imported, and the JVM's code paths
    # compiled (a session's first statements run slower).
    first = runs[0]["table"]
    for _ in range(3):
        copy(work / "tables" / f"{first}.lance", wh / "b" / "warmup.lance")
        spark.sql(call_statement("warmup", TARGETS[first], ns=wh.name + ".b")).collect()
    out = [{**r, "times": [], "rows": [], "layout": None} for r in runs]
    # Round robin, so that no path gets all of the session's early or late runs.
    for i in range(max(r.get("repeat", 3) for r in runs)):
        for r, o in zip(runs, out):
            if i < r.get("repeat", 3):
                _session_run(spark, work, wh, r, o, i)
    spark.stop()
    shutil.rmtree(wh, ignore_errors=True)
    return {"runs": out}


def probe_memory(work: Path, table: str) -> dict:
    """A fresh session compacts ``table`` once; the peak memory of each process after."""
    import lance

    wh = work / f"wh_{os.getpid()}"
    (wh / "b").mkdir(parents=True, exist_ok=True)
    spark = _session("local[2]", wh)
    src = work / "tables" / f"{table}.lance"
    dst = copy(src, wh / "b" / f"{table}.lance")
    t = time.perf_counter()
    row = spark.sql(call_statement(table, TARGETS[table])).collect()[0]
    seconds = time.perf_counter() - t
    procs = descendants(os.getpid())
    jvm = [p for p, c in procs if "java" in c.split(" ")[0]]
    engine = [p for p, c in procs if "lance_compact.engine" in c]
    workers = [p for p, c in procs if "pyspark.daemon" in c or "pyspark.worker" in c]
    peaks = {"driver_jvm_mb": max((peak_rss_kb(p) for p in jvm), default=0) // 1024,
             "engine_mb": max((peak_rss_kb(p) for p in engine), default=0) // 1024,
             "python_worker_mb": max((peak_rss_kb(p) for p in workers), default=0) // 1024,
             "python_workers": len(workers)}
    assert same_rows(lance.dataset(str(dst)), lance.dataset(str(src))), f"CALL changed the rows of {table}"
    spark.stop()
    shutil.rmtree(wh, ignore_errors=True)
    return {**peaks, "seconds": seconds, "tasks": row.tasks,
            "bytes": (row.bytes_read or 0) + (row.bytes_written or 0)}


def probe_scaling(work: Path, table: str, repeat: int) -> dict:
    """One task of 10 small fragments at the end of a table of many fragments: the same
    task through a warm CALL and through pylance, the table restored between runs."""
    import lance

    wh = work / f"wh_{os.getpid()}"
    (wh / "b").mkdir(parents=True, exist_ok=True)
    dst = copy(work / "tables" / f"{table}.lance", wh / "b" / f"{table}.lance")
    spark = _session("local[2]", wh)
    base = lance.dataset(str(dst)).version
    call, pylance_times = [], []
    for i in range(repeat + 1):  # the first CALL warms the session
        lance.dataset(str(dst), version=base).restore()
        t = time.perf_counter()
        row = spark.sql(call_statement(table, TARGETS[table])).collect()[0]
        if i:
            call.append(time.perf_counter() - t)
        assert row.tasks == 1, f"expected one task on {table}, got {row.tasks}"
        lance.dataset(str(dst), version=base).restore()
        ds = lance.dataset(str(dst))
        t = time.perf_counter()
        ds.optimize.compact_files(target_rows_per_fragment=TARGETS[table])
        if i:
            pylance_times.append(time.perf_counter() - t)
    fragments = len(lance.dataset(str(dst), version=base).get_fragments())
    spark.stop()
    shutil.rmtree(wh, ignore_errors=True)
    return {"call": call, "pylance": pylance_times, "fragments": fragments}


def probe_bandwidth(work: Path, mb: int) -> dict:
    """Sequential write (with fsync) and read (pages dropped first) of one file."""
    path = work / "bandwidth.bin"
    chunk = os.urandom(8 << 20)
    t = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(mb // 8):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    write = time.perf_counter() - t
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    t = time.perf_counter()
    while os.read(fd, 8 << 20):
        pass
    read = time.perf_counter() - t
    os.close(fd)
    path.unlink()
    return {"write_mb_s": mb / write, "read_mb_s": mb / read}


def _same_content(a: Any, b: Any) -> bool:
    return a.to_table().sort_by("id").equals(b.to_table().sort_by("id"))


def probe_warehouse_pylance(work: Path, repeat: int) -> dict:
    """pylance in one process, table after table: compact_files, optimize_indices,
    cleanup_old_versions -- what maintain does to each -- on fresh copies of the tables."""
    import datetime
    import lance

    src = work / "tables" / "warehouse"
    names = sorted(p.name for p in src.iterdir() if p.name.endswith(".lance"))
    times = []
    for i in range(repeat + 1):  # the first run warms this process
        dst = work / "runs" / "pylance-warehouse"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        os.sync()
        t = time.perf_counter()
        for name in names:
            ds = lance.dataset(str(dst / name))
            ds.optimize.compact_files()
            ds.optimize.optimize_indices()
            ds.cleanup_old_versions(older_than=datetime.timedelta(0))
        if i:
            times.append(time.perf_counter() - t)
        for name in names:
            assert _same_content(lance.dataset(str(dst / name)), lance.dataset(str(src / name))), name
    return {"times": times, "tables": len(names)}


def probe_warehouse_session(work: Path, repeat: int) -> dict:
    """A warm PySpark session: per run, fresh copies of the tables maintained by a CALL
    lance.maintain per table, and other fresh copies by one CALL lance.maintain_warehouse;
    then the health of the tiny tables (SELECT * FROM lance.system.table_health)."""
    import lance

    src = work / "tables" / "warehouse"
    names = sorted(p.name[:-6] for p in src.iterdir() if p.name.endswith(".lance"))
    wh = work / f"whw_{os.getpid()}"
    shutil.rmtree(wh, ignore_errors=True)
    wh.mkdir(parents=True)
    spark = _session("local[2]", wh)

    def fresh(ns: str) -> None:
        shutil.copytree(src, wh / ns)
        os.sync()

    def loop(ns: str) -> list:
        return [r for n in names for r in spark.sql(
            f"CALL lance.maintain(table => '{ns}.{n}', older_than => '0 seconds')").collect()]

    def together(ns: str) -> list:
        # what a user runs: the defaults (parallelism included)
        return spark.sql(f"CALL lance.maintain_warehouse(namespace => '{ns}', older_than => '0 seconds')").collect()

    fresh("warm1"), fresh("warm2")  # warm: engine, workers, both code paths
    loop("warm1"), together("warm2")
    out: dict[str, Any] = {"loop": [], "together": []}
    for i in range(repeat):
        for kind, run in (("loop", loop), ("together", together)):
            ns = f"{kind}{i}"
            fresh(ns)
            t = time.perf_counter()
            rows = run(ns)
            out[kind].append(time.perf_counter() - t)
            assert not [r for r in rows if getattr(r, "error", None)], [r for r in rows if r.error]
            for n in names:
                assert _same_content(lance.dataset(str(wh / ns / f"{n}.lance")),
                                     lance.dataset(str(src / f"{n}.lance"))), f"{kind} changed the rows of {n}"
            if kind == "together":
                out["ran"] = sorted({r.table.split(".")[1] for r in rows if r.ran})
                assert len(out["ran"]) == len(names), rows
    for child in wh.iterdir():
        shutil.rmtree(child)
    shutil.copytree(work / "tables" / "tiny", wh / "tiny")
    os.sync()
    spark.sql("SELECT * FROM lance.system.table_health").collect()  # warm
    out["health"] = []
    for _ in range(repeat):
        t = time.perf_counter()
        health = spark.sql("SELECT * FROM lance.system.table_health").collect()
        out["health"].append(time.perf_counter() - t)
    out["health_tables"] = len(health)
    assert all(h.error is None for h in health), [h for h in health if h.error][:3]
    spark.stop()
    shutil.rmtree(wh, ignore_errors=True)
    return out


PROBES = {"warehouse_pylance": probe_warehouse_pylance, "warehouse_session": probe_warehouse_session,
          "pylance": probe_pylance, "session": probe_session, "memory": probe_memory,
          "scaling": probe_scaling, "bandwidth": probe_bandwidth}
