"""Vector index builds on an object store with S3's round trips (issue 45, "Index work on object
stores"): ``CALL lance.create_index`` (every build on Spark tasks, as on a cluster) against
pylance's own ``create_index`` in the same run, on the same data, through one latency proxy.

The store is S3Proxy (benchmarks/s3proxy_server.py, not the bottleneck); every request of the
timed steps passes benchmarks/latency_proxy.py, which delays it by ``--latency-ms`` (an S3 round
trip) and counts it. Per index type, on fresh copies of one table (100,000 x 128-d float32 on a
16-d subspace plus noise, fragments of 25,000 rows, written before the proxy starts):

- pylance ``create_index`` in this process;
- the CALL with the product's defaults for the store (IVF_FLAT's, IVF_PQ's and IVF_RQ's segments
  committed as they are on an object store: indexing/commit.py ``keep_unmerged``);
- with ``--merge``, for a type kept unmerged, the CALL with ``merge_fan_in`` 16 given (the
  segments merged on the driver before the commit, as every build did before): the cost the
  default avoids;
- the CALL's requests by phase, the proxy's time-stamped request log cut where the engine's log
  (a file of this run's) says a phase ended: "open" up to the plan's line (the table opened,
  the fragments grouped), "train" up to "model trained" (none when the one task trains its own),
  "build" up to "segments built", "merge+commit" to the CALL's end (the cost record with it);
- each index queried: recall@10 against exact neighbours of ``--queries`` queries at nprobes 16
  (IVF_FLAT also every partition: its answers must equal pylance's index's), and one cold query
  (a fresh dataset object, nothing cached) with the requests it makes: the price of segments.

``--rows-per-segment`` (default 25,000) makes the CALL build 4 segments, as a table past the
default group size (262,144 rows a task) builds several (one task trains the model first); 0
keeps the product's default (one group at 100,000 rows: one task trains its own model and
builds the index, as pylance's create_index does; no merge either way).

    flock /tmp/lance-bench.lock .venv/bin/python benchmarks/index_s3.py --merge

Prints a markdown table (seconds, requests, ratios against pylance, recall) and the load average.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benchmarks"))

ENGINE_LOG = Path(tempfile.mkdtemp(prefix="index-s3-")) / "engine.log"
SPARK_CONF = {
    "spark.lance.compact.engine.log": str(ENGINE_LOG),  # the phases' ends (by_phase)
    "spark.lance.compact.engineRewrite.maxBatchBytes": "0",  # every build on Spark tasks, as on a cluster
    "spark.lance.compact.engineRewrite.maxBytes": "0",
    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
}


def data(rows: int, dim: int, per_fragment: int) -> tuple[list[Any], Any, Any]:
    """The table's batches (one a fragment), every vector, and the queries (deterministic)."""
    import numpy as np
    from indices import chunk, vector_batch
    sc = {"dim": dim, "subspace": 16}
    batches = [vector_batch(sc, 1 + i, start, min(per_fragment, rows - start))
               for i, start in enumerate(range(0, rows, per_fragment))]
    vectors = np.concatenate([b["emb"].combine_chunks().values.to_numpy().reshape(-1, dim) for b in batches])
    return batches, vectors, chunk(sc, 7, 64)


def write(uri: str, batches: list[Any], storage: dict[str, str]) -> None:
    import lance
    for i, b in enumerate(batches):
        lance.write_dataset(b, uri, mode="create" if i == 0 else "append", max_rows_per_file=b.num_rows,
                            storage_options=storage)


def exact(vectors: Any, queries: Any, k: int = 10) -> list[list[int]]:
    import numpy as np
    out = []
    for q in queries:
        d = ((vectors - q) ** 2).sum(axis=1)
        out.append(sorted(np.argpartition(d, k)[:k].tolist(), key=lambda i: d[i]))
    return out


def search(uri: str, storage: dict[str, str], queries: Any, nprobes: int, k: int = 10) -> list[list[int]]:
    import lance
    ds = lance.dataset(uri, storage_options=storage)
    return [ds.to_table(nearest={"column": "emb", "q": q, "k": k, "nprobes": nprobes}, columns=["id"])["id"]
            .to_pylist() for q in queries]


def recall(got: list[list[int]], truth: list[list[int]]) -> float:
    return sum(len(set(g) & set(t)) for g, t in zip(got, truth)) / sum(len(t) for t in truth)


def cold_query(uri: str, storage: dict[str, str], q: Any, proxy: Any) -> tuple[float, int]:
    """One query on a fresh dataset object (its index read from the store): seconds, requests."""
    import lance
    before = proxy.requests
    t = time.perf_counter()
    ds = lance.dataset(uri, storage_options=storage)
    ds.to_table(nearest={"column": "emb", "q": q, "k": 10, "nprobes": 16}, columns=["id"])
    return time.perf_counter() - t, proxy.requests - before


class _Stamped(list):
    """The proxy's request log, each request with the wall-clock time it was sent."""

    def append(self, line: str) -> None:
        super().append((time.time(), line))


# The engine's log lines that end a create_index phase (indexing/build.py, segments.py), by phase.
PHASE_ENDS = {"open": "create_index: {type} of", "train": "create_index: model trained",
              "build": "segments built"}


def by_phase(log: list[tuple[float, str]], engine_log: Path, table: str, index_type: str, start: float,
             end: float) -> dict[str, int]:
    """The CALL's requests (sent between ``start`` and ``end``, wall clock) by phase: each phase
    ends at the engine's log line for ``table`` in :data:`PHASE_ENDS` (its time to the
    millisecond); a phase whose line is missing has none (the one task trained its own model)."""
    import datetime
    ends: dict[str, float] = {}
    for line in engine_log.read_text(errors="replace").splitlines():
        if f"table {table}: " not in line:
            continue
        for phase, words in PHASE_ENDS.items():
            if words.format(type=index_type) in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if start <= stamp <= end:
                    ends[phase] = stamp
    out = {"open": 0, "train": 0, "build": 0, "commit": 0}
    for t, _ in log:
        if start <= t <= end:
            phase = next((p for p in ("open", "train", "build") if p in ends and t <= ends[p]), "commit")
            out[phase] += 1
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--per-fragment", type=int, default=25_000)
    p.add_argument("--rows-per-segment", type=int, default=25_000,
                   help="the CALL's rows_per_segment (default 25,000: 4 segments of the default table; "
                        "0: the product's grouping)")
    p.add_argument("--latency-ms", type=int, default=20)
    p.add_argument("--types", default="IVF_FLAT,IVF_PQ,IVF_RQ")
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--merge", action="store_true", help="also the CALL with merge_fan_in 16 (merged on the driver)")
    a = p.parse_args()

    import lance
    from conftest import lance_session
    from latency_proxy import LatencyProxy
    from s3proxy_server import S3ProxyServer
    from lance_compact.indexing.commit import UNMERGED_ON_STORES

    types = [t.strip().upper() for t in a.types.split(",")]
    partitions = max(1, round(math.sqrt(a.rows)))
    batches, vectors, queries = data(a.rows, a.dim, a.per_fragment)
    queries = queries[:a.queries]
    truth = exact(vectors, queries)
    variants = ["pylance", "ours"] + (["merged"] if a.merge else [])
    server = S3ProxyServer().start()
    proxy = None
    try:
        raw = server.storage_options
        bucket = server.fresh_bucket("index-s3")
        uris = {(t, v): f"{bucket}/wh/{v}/{t.lower()}.lance" for t in types for v in variants}
        for uri in uris.values():
            write(uri, batches, raw)
        write(f"{bucket}/wh/warm/t.lance", [b.slice(0, 2_000) for b in batches[:2]], raw)
        stamped = _Stamped()
        proxy = LatencyProxy(server.endpoint, a.latency_ms, stamped).start()
        storage = {**raw, "aws_endpoint": proxy.endpoint}
        spark = lance_session("local[2]", "lance-compact-index-s3", f"{bucket}/wh", SPARK_CONF,
                              storage_options=storage)
        segment = {"rows_per_segment": str(a.rows_per_segment)} if a.rows_per_segment else {}
        phases: dict[str, dict[str, int]] = {}

        def call(table: str, index_type: str, extra: dict[str, str]) -> tuple[float, int, Any]:
            options = {"num_partitions": str(partitions), **({"num_sub_vectors": "16"} if index_type == "IVF_PQ" else {}),
                       **segment, **extra}
            text = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
            before, t = proxy.requests, time.time()
            row = spark.sql(f"CALL lance.create_index(table => '{table}', column => 'emb', index_type => "
                            f"'{index_type}', name => 'emb_idx', options => map({text}))").collect()[0]
            end = time.time()
            phases[table] = by_phase(stamped, ENGINE_LOG, table, index_type, t, end)
            del stamped[:]
            return end - t, proxy.requests - before, row

        # the engine, the executors' Python workers and their imports, the store's clients
        call("warm.t", "IVF_FLAT", {"num_partitions": "4", "rows_per_segment": "1000"})
        load = [os.getloadavg()]
        lines = []
        for index_type in types:
            results: dict[str, dict[str, Any]] = {}
            variants = ["pylance", "ours"] + (["merged"] if a.merge and index_type in UNMERGED_ON_STORES else [])
            uri = uris[(index_type, "pylance")]
            ds = lance.dataset(uri, storage_options=storage)
            del stamped[:]
            before, t = proxy.requests, time.perf_counter()
            ds.create_index("emb", index_type, name="emb_idx", num_partitions=partitions,
                            **({"num_sub_vectors": 16} if index_type == "IVF_PQ" else {}))
            results["pylance"] = {"seconds": time.perf_counter() - t, "requests": proxy.requests - before}
            for v in variants[1:]:
                seconds, requests, row = call(f"{v}.{index_type.lower()}", index_type,
                                              {"merge_fan_in": "16"} if v == "merged" else {})
                results[v] = {"seconds": seconds, "requests": requests, "row": row}
            for v in variants:
                u = uris[(index_type, v)]
                r = results[v]
                r["recall"] = recall(search(u, storage, queries, 16), truth)
                r["cold_s"], r["cold_requests"] = cold_query(u, storage, queries[0], proxy)
                r["segments"] = sum(len(i.segments) for i in lance.dataset(u, storage_options=storage)
                                    .describe_indices())
                if index_type == "IVF_FLAT":
                    r["all"] = search(u, storage, queries, partitions)
            if index_type == "IVF_FLAT":
                same = all(results[v]["all"] == results["pylance"]["all"] for v in variants)
                print(f"IVF_FLAT, every partition searched: answers equal pylance's index's: {same}", flush=True)
            base = results["pylance"]["seconds"]
            for v in variants:
                r = results[v]
                row = r.get("row")
                n = phases.get(f"{v}.{index_type.lower()}", {})
                phases_s = (f"train {row.train_ms / 1000:.2f}, build {row.build_ms / 1000:.2f}, merge+commit "
                            f"{row.commit_ms / 1000:.2f}" if row is not None else "")
                phases_n = (f"{n['open']} / {n['train']} / {n['build']} / {n['commit']}" if row is not None else "")
                name = {"pylance": "pylance `create_index`", "ours": "`CALL lance.create_index` (default)",
                        "merged": "the CALL, `merge_fan_in` 16 (merged on the driver)"}[v]
                lines.append(f"| {index_type} | {name} | {r['seconds']:.2f} | {r['seconds'] / base:.2f}x | "
                             f"{r['requests']:,} | {phases_s} | {phases_n} | {r['segments']} | {r['recall']:.3f} | "
                             f"{r['cold_s']:.2f} s, {r['cold_requests']} |")
                print(lines[-1], flush=True)
            load.append(os.getloadavg())
        spark.stop()
        print(f"\n{a.rows:,} x {a.dim}-d, fragments of {a.per_fragment:,}, {partitions} partitions, "
              f"rows_per_segment {a.rows_per_segment or 'default'}, {a.latency_ms} ms a request, local[2]; "
              f"load average (1, 5, 15 min) at the start {load[0]}, at the end {load[-1]}\n")
        print("| type | path | seconds | vs pylance | requests | CALL's phases (s) | requests: open / train / "
              "build / merge+commit | segments | recall@10 (nprobes 16) | a cold query (nprobes 16): time, requests |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(lines))
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
