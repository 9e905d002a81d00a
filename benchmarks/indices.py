"""The benchmark section "indices" (issue 35, item 5), one run, ratios against pylance in the
same run (not run in CI):

- ``create_index``: pylance's in-process ``create_index`` against ``CALL lance.create_index``
  on local[2] and on a standalone cluster of two one-core workers (started here on 127.0.0.1),
  same parameters, every build on Spark tasks (``engineRewrite.maxBatchBytes`` 0); IVF_PQ on N
  and 4N vectors, BTREE on the scalar table;
- ``optimize_indices`` after a 1% append, at N and 4N (the time should follow the append, not
  the table): ours on local[2] and on the cluster against pylance's ``optimize_indices``, with
  its default and with ``num_indices_to_merge=0`` (an added delta, as ours does);
- peak memory per task (the largest Python worker's resident set, sampled every 50 ms from
  ``/proc`` while the statement runs; the engine's and the JVMs' beside it) at N and 4N;
- recall@10 against brute force (exact kNN of every query over every row) before and after
  each step, at three search settings (nprobes, refine_factor); BTREE answers against a scan.

The data has real neighbours: vectors on a low-dimensional random subspace plus a little noise
(isotropic noise gives even pylance's own index a recall@10 of 0.16), generated from fixed
seeds chunk by chunk (the 4N table's first N rows are the N table), written once and kept
under ``--work`` with the exact neighbours of the queries. Each timed path runs on a fresh
copy (synced to disk first); the Spark paths run in a process of their own per master and
size (a fresh session, warmed on a tiny table first).

    .venv/bin/python benchmarks/indices.py --scale small     # 50k x 32-d, 500k BTREE rows: a check
    .venv/bin/python benchmarks/indices.py --scale full      # 1M x 128-d (and 4M), 10M BTREE rows

Writes ``indices-<scale>.md`` (the table) and ``indices-<scale>.json`` to ``--out``.
Absolute times on a shared machine drift; ratios within one run hold better; no figure from a
busy machine belongs in the docs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from probes import roles_below, rss_kb

ROOT = Path(__file__).resolve().parents[1]

SCALES: dict[str, dict[str, Any]] = {
    # IVF_PQ as issue 35 asks (256 partitions, 16 sub-vectors); pylance 1M x 128-d took ~30 s
    # on 2 cores. Segments: the product's default grouping (1M rows a segment at least).
    "full": dict(rows=1_000_000, dim=128, subspace=16, per_fragment=100_000, partitions=256, sub_vectors=16,
                 btree_rows=10_000_000, btree_per_fragment=1_000_000, queries=300,
                 searches=[(16, None), (48, None), (48, 5)], rows_per_segment=None),
    # A check that every path works: segments of N/2 rows so that N and 4N build in several tasks
    # of equal size, as the full scale's default grouping does (1M rows a segment).
    "small": dict(rows=50_000, dim=32, subspace=8, per_fragment=5_000, partitions=32, sub_vectors=8,
                  btree_rows=500_000, btree_per_fragment=50_000, queries=200,
                  searches=[(2, None), (6, None), (6, 5)], rows_per_segment=25_000),
}
NOISE = 0.05
APPEND_SEED = 10_000_000  # the 1% append's chunk seed: beyond every table's chunks
SPARK_CONF = {
    "spark.lance.compact.engineRewrite.maxBatchBytes": "0",  # every build on Spark tasks
    # the index builds read the setting's former name (python/lance_compact/indexing/build.py)
    "spark.lance.compact.engineRewrite.maxBytes": "0",
    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
}


# ---------------------------------------------------------------- data (deterministic)

def basis(sc: dict) -> Any:
    import numpy as np
    return np.random.default_rng(0).standard_normal((sc["subspace"], sc["dim"])).astype(np.float32)


def chunk(sc: dict, seed: int, n: int) -> Any:
    """``n`` vectors on the subspace with noise, from ``seed`` alone."""
    import numpy as np
    rng = np.random.default_rng(seed)
    coords = rng.standard_normal((n, sc["subspace"])).astype(np.float32)
    return coords @ basis(sc) + NOISE * rng.standard_normal((n, sc["dim"])).astype(np.float32)


def vector_batch(sc: dict, seed: int, start: int, n: int) -> Any:
    import numpy as np
    import pyarrow as pa
    v = chunk(sc, seed, n)
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "emb": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), sc["dim"])})


def vector_chunks(sc: dict, rows: int) -> list[tuple[int, int, int]]:
    """(seed, first id, rows) of each fragment of a table of ``rows`` vectors."""
    per = sc["per_fragment"]
    return [(1 + i, i * per, min(per, rows - i * per)) for i in range((rows + per - 1) // per)]


def append_chunk(sc: dict, rows: int) -> tuple[int, int, int]:
    """The 1% append to a table of ``rows``: (seed, first id, rows)."""
    return (APPEND_SEED + rows, rows, max(1, rows // 100))


def write_chunks(uri: str, sc: dict, chunks: list[tuple[int, int, int]], mode: str) -> None:
    import lance
    for i, (seed, start, n) in enumerate(chunks):
        lance.write_dataset(vector_batch(sc, seed, start, n), uri, mode=mode if i == 0 else "append",
                            max_rows_per_file=n)


def btree_batch(start: int, n: int) -> Any:
    import numpy as np
    import pyarrow as pa
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "key": (ids * 2654435761) % (1 << 40)})  # distinct, unordered


def queries(sc: dict) -> Any:
    return chunk(sc, 7, sc["queries"])


def exact_neighbours(sc: dict, chunks: list[tuple[int, int, int]], k: int = 10) -> tuple[Any, Any]:
    """(distances, ids) of every query's ``k`` nearest rows (L2) over ``chunks``, merged chunk by chunk."""
    import numpy as np
    q = queries(sc).astype(np.float64)
    best_d = np.full((len(q), k), np.inf)
    best_i = np.zeros((len(q), k), dtype=np.int64)
    for seed, start, n in chunks:
        v = chunk(sc, seed, n).astype(np.float64)
        d = (v * v).sum(1)[None, :] - 2 * q @ v.T + (q * q).sum(1)[:, None]
        top = np.argpartition(d, min(k, n - 1), axis=1)[:, :k]
        cand_d = np.concatenate([best_d, np.take_along_axis(d, top, 1)], 1)
        cand_i = np.concatenate([best_i, top + start], 1)
        order = np.argsort(cand_d, 1)[:, :k]
        best_d, best_i = np.take_along_axis(cand_d, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_d, best_i


def build_data(work: Path, sc: dict) -> dict[str, Any]:
    """The tables (N, 4N vectors; the BTREE table) and the exact neighbours, kept between runs."""
    import lance
    import numpy as np
    tables = work / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"tables": {}, "truth": {}}
    n = sc["rows"]
    for rows in (n, 4 * n):
        uri = tables / f"vec_{rows}x{sc['dim']}.lance"
        stamp = uri.with_suffix(".json")
        spec = json.dumps({k: sc[k] for k in ("dim", "subspace", "per_fragment")} | {"rows": rows, "noise": NOISE})
        if not (uri.exists() and stamp.exists() and stamp.read_text() == spec):
            print(f"  writing {rows:,} x {sc['dim']}-d vectors", flush=True)
            shutil.rmtree(uri, ignore_errors=True)
            write_chunks(str(uri), sc, vector_chunks(sc, rows), "create")
            stamp.write_text(spec)
        out["tables"][rows] = uri
        truth = tables / f"truth_{rows}x{sc['dim']}_q{sc['queries']}.npz"
        if not (truth.exists() and stamp.exists() and json.loads(np.load(truth)["spec"].item()) == json.loads(spec)):
            print(f"  exact neighbours over {rows:,} rows (and after the 1% append)", flush=True)
            base = vector_chunks(sc, rows)
            d0, i0 = exact_neighbours(sc, base)
            d1, i1 = exact_neighbours(sc, base + [append_chunk(sc, rows)])
            np.savez(truth, before=i0, after=i1, spec=np.array(spec))
        t = np.load(truth)
        out["truth"][rows] = {"before": [set(r) for r in t["before"].tolist()],
                              "after": [set(r) for r in t["after"].tolist()]}
        assert lance.dataset(str(uri)).count_rows() == rows
    uri = tables / f"btree_{sc['btree_rows']}.lance"
    stamp = uri.with_suffix(".json")
    spec = json.dumps({"rows": sc["btree_rows"], "per": sc["btree_per_fragment"]})
    if not (uri.exists() and stamp.exists() and stamp.read_text() == spec):
        print(f"  writing {sc['btree_rows']:,} scalar rows", flush=True)
        shutil.rmtree(uri, ignore_errors=True)
        per = sc["btree_per_fragment"]
        for i, start in enumerate(range(0, sc["btree_rows"], per)):
            lance.write_dataset(btree_batch(start, min(per, sc["btree_rows"] - start)), str(uri),
                                mode="create" if i == 0 else "append", max_rows_per_file=per)
        stamp.write_text(spec)
    out["btree"] = uri
    os.sync()
    return out


# ---------------------------------------------------------------- checks

def recall(uri: Path, sc: dict, truth: list[set]) -> list[float]:
    """recall@10 at each search setting of the scale."""
    import lance
    ds = lance.dataset(str(uri))
    q = queries(sc)
    out = []
    for nprobes, refine in sc["searches"]:
        found = 0
        for v, t in zip(q, truth):
            nearest = {"column": "emb", "q": v, "k": 10, "nprobes": nprobes}
            if refine:
                nearest["refine_factor"] = refine
            found += len(t & set(ds.to_table(nearest=nearest, columns=["id"], disable_scoring_autoprojection=True)["id"].to_pylist()))
        out.append(round(found / (10 * len(q)), 3))
    return out


def btree_agrees(uri: Path, rows: int) -> bool:
    """A few equality and range filters through the index equal a scan."""
    import lance
    ds = lance.dataset(str(uri))
    assert any(i.name == "key_idx" for i in ds.describe_indices()), "no key_idx"
    keys = [(i * 2654435761) % (1 << 40) for i in (0, 1, rows // 3, rows - 1)]
    filters = [f"key = {k}" for k in keys] + [f"key >= {keys[2]} AND key < {keys[2] + (1 << 30)}", "key < 1000000"]
    for f in filters:
        a = ds.to_table(filter=f, columns=["id"])["id"].to_pylist()
        b = ds.to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist()
        if sorted(a) != sorted(b):
            return False
    return True


def segments(uri: Path, name: str = "emb_idx") -> int:
    import lance
    return next(len(i.segments) for i in lance.dataset(str(uri)).describe_indices() if i.name == name)


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    os.sync()
    return dst


def do_append(uri: Path, sc: dict, rows: int) -> None:
    write_chunks(str(uri), sc, [append_chunk(sc, rows)], "append")
    os.sync()


# ---------------------------------------------------------------- memory sampling (/proc)

class Sampler(threading.Thread):
    """Peaks (kB) of the largest Python worker, of the engine and of all JVMs below ``roots``
    (the processes listed once a second, their resident sets read every 50 ms)."""

    def __init__(self, roots: list[int]) -> None:
        super().__init__(daemon=True)
        self.roots, self.done = roots, threading.Event()
        self.peaks = {"worker_peak": 0, "engine": 0, "jvm": 0}

    def run(self) -> None:
        roles: dict[int, str] = {}
        listed = 0.0
        while not self.done.is_set():
            if time.monotonic() - listed > 1:  # walking /proc costs more than reading a few pids
                roles, listed = roles_below(self.roots), time.monotonic()
            now = {"worker_peak": max((rss_kb(p) for p, r in roles.items() if r == "worker"), default=0),
                   "engine": sum(rss_kb(p) for p, r in roles.items() if r == "engine"),
                   "jvm": sum(rss_kb(p) for p, r in roles.items() if r == "jvm")}
            for k, v in now.items():
                self.peaks[k] = max(self.peaks[k], v)
            self.done.wait(0.05)

    def finish(self) -> dict[str, int]:
        self.done.set()
        self.join()
        return {f"{k}_mb": v // 1024 for k, v in self.peaks.items()}


# ---------------------------------------------------------------- the Spark side (own process)

def call_text(job: dict) -> str:
    if job["kind"] == "optimize":
        return f"CALL lance.optimize_indices(table => '{job['table']}')"
    opts = ", ".join(f"'{k}', '{v}'" for k, v in job["options"].items())
    return (f"CALL lance.create_index(table => '{job['table']}', column => '{job['column']}', "
            f"index_type => '{job['type']}', name => '{job['name']}'" + (f", options => map({opts})" if opts else "")
            + ")")


def session_main(master: str, warehouse: str, jobs: list[dict], roots: list[int]) -> dict:
    """A fresh session on ``master``, warmed on the tiny table ``b.warm``; each job timed, its row
    and the memory peaks while it ran."""
    sys.path.insert(0, str(ROOT / "python"))
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    builder = SparkSession.builder.master(master).appName("lance-compact-indices-benchmark")
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    if master.startswith("spark://"):
        builder = builder.config("spark.executor.memory", "2g").config("spark.executor.cores", "1")
    spark = configure_spark_with_lance_compact(builder, warehouse=warehouse).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for warm in jobs[0]["warm"]:  # engine, Python workers (executors), imports, the JVM's paths
        spark.sql(call_text(warm)).collect()
    out = []
    for job in jobs:
        sampler = Sampler([os.getpid(), *roots])
        sampler.start()
        t = time.perf_counter()
        row = spark.sql(call_text(job)).collect()[0].asDict(recursive=True)
        seconds = time.perf_counter() - t
        out.append({"seconds": seconds, "row": row, **sampler.finish()})
    spark.stop()
    return {"jobs": out}


def run_session(master: str, warehouse: Path, jobs: list[dict], roots: list[int]) -> list[dict]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    p = subprocess.run([sys.executable, __file__, "--session", master, "--warehouse", str(warehouse),
                        "--jobs", json.dumps(jobs), "--roots", json.dumps(roots)],
                       capture_output=True, text=True, env=env, timeout=4 * 3600)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"the session on {master} failed:\n{p.stderr[-5000:]}")
    return json.loads(lines[-1][len("RESULT "):])["jobs"]


# ---------------------------------------------------------------- the standalone cluster

def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A master and two one-core workers on 127.0.0.1 from the pip-installed Spark (bounded waits)."""

    def __init__(self, logs: Path) -> None:
        import pyspark
        home = os.path.dirname(pyspark.__file__)
        env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        logs.mkdir(parents=True, exist_ok=True)
        port, ui = _port(), _port()
        self.url = f"spark://127.0.0.1:{port}"
        cls = os.path.join(home, "bin", "spark-class")
        self.procs = [subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                        "--port", str(port), "--webui-port", str(ui)], env=env,
                                       stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)]
        try:
            for i in (1, 2):
                self.procs.append(subprocess.Popen(
                    [cls, "org.apache.spark.deploy.worker.Worker", self.url, "--cores", "1", "--memory", "6g",
                     "--host", "127.0.0.1", "--webui-port", str(_port()), "--work-dir", str(logs / f"work{i}")],
                    env=env, stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 120
            while True:
                try:
                    state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2).read())
                    if sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == 2:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster's workers did not register in 120 s:\n"
                                       + (logs / "master.log").read_text()[-3000:])
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs[1:]]

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)


# ---------------------------------------------------------------- the run

class Report:
    def __init__(self, sc: dict) -> None:
        self.sc, self.rows = sc, []

    def add(self, step: str, size: str, path: str, seconds: float | None, anchor: dict | None = None,
            recall: list[float] | None = None, memory: dict | None = None, note: str = "") -> dict:
        r = {"step": step, "size": size, "path": path, "seconds": seconds,
             "ratio": seconds / anchor["seconds"] if anchor and seconds is not None else None,
             "recall": recall, "memory": memory, "note": note}
        self.rows.append(r)
        print("  " + self.line(r), flush=True)
        return r

    def line(self, r: dict) -> str:
        secs = f"{r['seconds']:.2f}" if r["seconds"] is not None else ""
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
        rec = " / ".join(f"{x:.3f}" for x in r["recall"]) if r["recall"] else ""
        mem = (f"{r['memory']['worker_peak_mb']} / {r['memory']['engine_mb']}" if r["memory"] else "")
        return f"| {r['step']} | {r['size']} | {r['path']} | {secs} | {ratio} | {rec} | {mem} | {r['note']} |"

    def markdown(self, header: str) -> str:
        settings = ", ".join(f"nprobes {n}" + (f" refine {f}" if f else "") for n, f in self.sc["searches"])
        return (header + "\n\n| step | table | path | seconds | vs pylance | recall@10 (" + settings
                + ") | peak MiB: largest Python worker / engine | note |\n|---|---|---|---|---|---|---|---|\n"
                + "\n".join(self.line(r) for r in self.rows) + "\n")


def growth(rows: list[dict], small: str, big: str) -> str:
    """Each timed path's seconds and peak worker memory at 4N against N (the same path)."""
    lines = ["as the table grows 4x (4N / N, the same path): seconds; peak MiB of the largest Python worker", ""]
    for r4 in rows:
        r1 = next((r for r in rows if r["size"] == small and r["step"] == r4["step"] and r["path"] == r4["path"]),
                  None)
        if r4["size"] != big or r1 is None or r4["seconds"] is None:
            continue
        mem = (f"; worker {r1['memory']['worker_peak_mb']} -> {r4['memory']['worker_peak_mb']} MiB "
               f"(x{r4['memory']['worker_peak_mb'] / max(1, r1['memory']['worker_peak_mb']):.2f})"
               if r1["memory"] and r4["memory"] else "")
        lines.append(f"- {r4['step']}, {r4['path']}: {r1['seconds']:.2f} -> {r4['seconds']:.2f} s "
                     f"(x{r4['seconds'] / r1['seconds']:.2f}){mem}")
    return "\n".join(lines)


def ivf_options(sc: dict) -> dict[str, str]:
    o = {"num_partitions": str(sc["partitions"]), "num_sub_vectors": str(sc["sub_vectors"])}
    if sc["rows_per_segment"]:
        o["rows_per_segment"] = str(sc["rows_per_segment"])
    return o


def warm_jobs(sc: dict) -> list[dict]:
    return [{"kind": "create", "table": "b.warm", "column": "emb", "type": "IVF_PQ", "name": "emb_idx",
             "options": {"num_partitions": "4", "num_sub_vectors": str(sc["sub_vectors"])}},
            {"kind": "create", "table": "b.warm", "column": "id", "type": "BTREE", "name": "id_idx", "options": {}}]


def spark_paths(a: argparse.Namespace, cluster: Cluster | None) -> list[tuple[str, str, list[int]]]:
    paths = [("local[2]", "local[2]", [])]
    if cluster is not None:
        paths.append(("cluster", cluster.url, cluster.worker_pids))
    return paths


def main_run(a: argparse.Namespace) -> int:
    import lance
    sc = dict(SCALES[a.scale])
    if a.rows_per_segment is not None:
        sc["rows_per_segment"] = a.rows_per_segment or None
    work = Path(a.work) / a.scale
    started = time.time()
    print(f"indices benchmark ({a.scale}), {len(os.sched_getaffinity(0))} CPUs, work folder {work}", flush=True)
    data = build_data(work, sc)
    n = sc["rows"]
    sizes = {n: f"{n:,} x {sc['dim']}-d", 4 * n: f"{4 * n:,} x {sc['dim']}-d"}
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    report = Report(sc)
    cluster = None if a.no_cluster else Cluster(work / "cluster")
    try:
        for rows in (n, 4 * n):
            size, src, truth = sizes[rows], data["tables"][rows], data["truth"][rows]
            # pylance in this process: the IVF_PQ build (its result is the optimize runs' base)
            base = fresh_copy(src, runs / "base" / "t.lance")
            ds = lance.dataset(str(base))
            t = time.perf_counter()
            ds.create_index("emb", "IVF_PQ", name="emb_idx", num_partitions=sc["partitions"],
                            num_sub_vectors=sc["sub_vectors"])
            py_create = report.add("create_index IVF_PQ", size, "pylance create_index, in-process",
                                   time.perf_counter() - t, recall=recall(base, sc, truth["before"]))
            py_btree = None
            if rows == n:
                bt = fresh_copy(data["btree"], runs / "btree" / "t.lance")
                t = time.perf_counter()
                lance.dataset(str(bt)).create_scalar_index("key", "BTREE", name="key_idx")
                py_btree = report.add("create_index BTREE", f"{sc['btree_rows']:,} rows",
                                      "pylance create_scalar_index, in-process", time.perf_counter() - t,
                                      note="answers = scan" if btree_agrees(bt, sc["btree_rows"]) else "ANSWERS DIFFER")
                shutil.rmtree(bt.parent)
            lance.dataset(str(base)).create_scalar_index("id", "BTREE", name="id_idx")  # untimed: optimize's 2nd index
            report.add("before the append", size, "IVF_PQ + BTREE (pylance)", None,
                       recall=recall(base, sc, truth["before"]))
            appended = fresh_copy(base, runs / "appended" / "t.lance")
            do_append(appended, sc, rows)
            report.add("1% append, not yet indexed", size, "(unindexed rows scanned)", None,
                       recall=recall(appended, sc, truth["after"]))
            # pylance's optimize_indices, its default and an added delta
            py_opt = None
            for label, kw in (("pylance optimize_indices()", {}),
                              ("pylance optimize_indices(num_indices_to_merge=0)", {"num_indices_to_merge": 0})):
                c = fresh_copy(appended, runs / "pyopt" / "t.lance")
                t = time.perf_counter()
                lance.dataset(str(c)).optimize.optimize_indices(**kw)
                seconds = time.perf_counter() - t
                r = report.add("optimize_indices after 1%", size, label, seconds, anchor=py_opt,
                               recall=recall(c, sc, truth["after"]), note=f"{segments(c)} vector segments")
                py_opt = py_opt or r
            shutil.rmtree(runs / "pyopt")
            # ours: a fresh session per master and size
            for label, master, roots in spark_paths(a, cluster):
                wh = runs / "wh"
                shutil.rmtree(wh, ignore_errors=True)
                write_chunks(str(wh / "b" / "warm.lance"), sc, [(99, 0, 2000)], "create")
                fresh_copy(src, wh / "b" / "create.lance")
                fresh_copy(appended, wh / "b" / "opt.lance")
                jobs = [{"kind": "create", "table": "b.create", "column": "emb", "type": "IVF_PQ",
                         "name": "emb_idx", "options": ivf_options(sc), "warm": warm_jobs(sc)}]
                if rows == n:
                    fresh_copy(data["btree"], wh / "b" / "btree.lance")
                    jobs.append({"kind": "create", "table": "b.btree", "column": "key", "type": "BTREE",
                                 "name": "key_idx", "options": {}})
                jobs.append({"kind": "optimize", "table": "b.opt"})
                done = run_session(master, wh, jobs, roots)
                create = done[0]
                assert create["row"]["built_by"] == "spark tasks", create["row"]
                report.add("create_index IVF_PQ", size, f"CALL lance.create_index, {label}", create["seconds"],
                           anchor=py_create, recall=recall(wh / "b" / "create.lance", sc, truth["before"]),
                           memory=create, note=f"{create['row']['segments_built']} segments, "
                           f"sample {create['row']['sample_rows']:,}, train {create['row']['train_ms'] / 1000:.1f} s")
                if rows == n:
                    bt = done[1]
                    assert bt["row"]["built_by"] == "spark tasks", bt["row"]
                    report.add("create_index BTREE", f"{sc['btree_rows']:,} rows", f"CALL lance.create_index, {label}",
                               bt["seconds"], anchor=py_btree, memory=bt,
                               note=f"{bt['row']['segments_built']} segments; answers = scan"
                               if btree_agrees(wh / "b" / "btree.lance", sc["btree_rows"]) else "ANSWERS DIFFER")
                opt = done[-1]
                assert "spark tasks" in (opt["row"]["built_by"] or ""), opt["row"]
                report.add("optimize_indices after 1%", size, f"CALL lance.optimize_indices, {label}",
                           opt["seconds"], anchor=py_opt, recall=recall(wh / "b" / "opt.lance", sc, truth["after"]),
                           memory=opt, note=f"{opt['row']['rows_indexed']:,} rows indexed, "
                           f"{segments(wh / 'b' / 'opt.lance')} vector segments")
                shutil.rmtree(wh)
            shutil.rmtree(runs)
    finally:
        if cluster is not None:
            cluster.stop()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    header = (f"indices benchmark, scale {a.scale}: rows_per_segment {sc['rows_per_segment'] or 'default'}; IVF_PQ (num_partitions {sc['partitions']}, num_sub_vectors "
              f"{sc['sub_vectors']}) on {n:,} and {4 * n:,} x {sc['dim']}-d vectors on a {sc['subspace']}-d subspace; "
              f"BTREE on {sc['btree_rows']:,} rows; {len(os.sched_getaffinity(0))} CPUs; "
              f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; load average at the end "
              f"{os.getloadavg()[0]:.1f}; {time.time() - started:.0f} s")
    md = report.markdown(header) + "\n" + growth(report.rows, sizes[n], sizes[4 * n]) + "\n"
    (out / f"indices-{a.scale}.md").write_text(md)
    (out / f"indices-{a.scale}.json").write_text(json.dumps({"scale": a.scale, "settings": sc, "rows": report.rows,
                                                             "seconds": time.time() - started}, indent=1, default=str))
    print("\n" + md)
    print("ratio: the path's seconds / pylance's on the same data in this run (optimize: against pylance's "
          "default optimize_indices()); recall@10 against exact neighbours of "
          f"{sc['queries']} queries; memory: peak resident set while the statement ran")
    print(f"wrote {out / f'indices-{a.scale}.md'} and .json in {time.time() - started:.0f} s")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", choices=sorted(SCALES), default="small")
    p.add_argument("--no-cluster", action="store_true", help="local[2] only (no standalone cluster)")
    p.add_argument("--rows-per-segment", type=int,
                   help="the CALLs' rows_per_segment for IVF_PQ (0: the product's default grouping, which builds "
                        "1M rows as one segment, one task); default: the scale's")
    p.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "lance-compact-bench" / "indices"),
                   help="tables and exact neighbours (kept between runs) and the runs' copies")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--session", help=argparse.SUPPRESS)
    p.add_argument("--warehouse", help=argparse.SUPPRESS)
    p.add_argument("--jobs", help=argparse.SUPPRESS)
    p.add_argument("--roots", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.session:
        print("RESULT " + json.dumps(session_main(a.session, a.warehouse, json.loads(a.jobs), json.loads(a.roots)),
                                     default=str), flush=True)
        return 0
    return main_run(a)


if __name__ == "__main__":
    raise SystemExit(main())
