"""pylance alone, one process, one session: does its memory level off under the operations the
engine runs? (issue 33, item 7; docs/benchmark.md "Hours, caches full from the start").

    MALLOC_ARENA_MAX=2 .venv/bin/python benchmarks/pylance_memory_loop.py --rounds 300

Four tables with a BTREE on id; each round, on every table: append 50 rows, delete a fifth of
them, compaction by Lance's plan/execute/commit, index upkeep, cleanup of every old version
(``--ops`` picks), a count and a filtered read, the last 20 versions opened with their index
descriptions, fragments listed. Every 25 rounds: the resident set, the C heap in use and the
free memory it holds (glibc's mallinfo2, after a trim), the session's caches (2 MiB bounds,
as the soak's engines) and Python's allocated blocks.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import shutil
import sys
import tempfile
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from lance.optimize import Compaction

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from lance_compact.runtime.memory import _trimmer, heap_bytes, rss_bytes  # noqa: E402

OPS = ("append", "delete", "compact", "indices", "cleanup", "read", "versions", "describe")


def batch(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "tenant": pa.array([f"t{i % 7}" for i in range(n)]), "v": pa.array(np.random.rand(n))})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--ops", default=",".join(OPS), help=f"a comma-separated subset of {', '.join(OPS)}")
    a = p.parse_args()
    ops = set(a.ops.split(","))
    root = Path(tempfile.mkdtemp(prefix="pylance-memory-"))
    session = lance.Session(index_cache_size_bytes=2 << 20, metadata_cache_size_bytes=2 << 20)
    trim = _trimmer()
    uris = [str(root / f"t{i}.lance") for i in range(4)]
    for u in uris:
        lance.write_dataset(batch(0, 50), u)
        lance.dataset(u).create_scalar_index("id", "BTREE")
    start = 50
    try:
        for r in range(1, a.rounds + 1):
            for u in uris:
                if "append" in ops:
                    lance.write_dataset(batch(start, 50), u, mode="append")
                if "delete" in ops:
                    lance.dataset(u, session=session).delete(f"id % 5 = 0 and id >= {start}")
                if "compact" in ops:
                    ds = lance.dataset(u, session=session)
                    plan = Compaction.plan(ds, {"target_rows_per_fragment": 100_000})
                    if plan.num_tasks():
                        Compaction.commit(ds, [t.execute(ds) for t in plan.tasks])
                if "indices" in ops:
                    lance.dataset(u, session=session).optimize.optimize_indices()
                if "cleanup" in ops:
                    lance.dataset(u, session=session).cleanup_old_versions(older_than=dt.timedelta(0))
                if "read" in ops:
                    ds = lance.dataset(u, session=session)
                    ds.count_rows()
                    ds.to_table(filter="id < 100")
                if "versions" in ops:
                    ds = lance.dataset(u, session=session)
                    for v in ds.versions()[-20:]:
                        lance.dataset(u, version=v["version"], session=session).describe_indices()
                if "describe" in ops:
                    ds = lance.dataset(u, session=session)
                    ds.describe_indices()
                    ds.get_fragments()
            start += 50
            if r % 25 == 0:
                gc.collect()
                if trim is not None:
                    trim()
                heap = heap_bytes() or (0, 0)
                print(f"round {r:4d}: rss {rss_bytes() / 2**20:6.1f} MiB, C heap {heap[0] / 2**20:5.1f} MiB in use, "
                      f"{heap[1] / 2**20:4.1f} MiB free; session caches {session.size_bytes() / 2**20:.1f} MiB; "
                      f"Python {sys.getallocatedblocks()} blocks", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
