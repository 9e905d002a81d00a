"""Index queries against a brute-force scan, and the job descriptions of an event log, shared by
the index tests."""
import json

import numpy as np


def index_agrees_with_scan(ds):
    """BTREE and IVF_PQ queries equal a brute-force scan (IVF_PQ: every partition probed and
    every candidate re-ranked exactly, so only the index path differs)."""
    for f in ["id = 123", "id < 300", "id >= 1000 AND id < 1100", "id % 50 = 1"]:
        indexed = ds.to_table(filter=f, columns=["id", "payload"]).sort_by("id")
        scanned = ds.to_table(filter=f, columns=["id", "payload"], use_scalar_index=False).sort_by("id")
        assert indexed == scanned, f
    rng = np.random.default_rng(3)
    for _ in range(4):
        q = rng.standard_normal(8).astype(np.float32)
        ann = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4, "refine_factor": 500},
                          columns=["id"])["id"].to_pylist()
        exact = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "use_index": False},
                            columns=["id"])["id"].to_pylist()
        assert ann == exact


def job_descriptions(events) -> list[str]:
    """The description of every job started in the Spark event logs under folder ``events``."""
    out = []
    for f in events.rglob("*"):
        if f.is_file() and not f.name.endswith(".crc"):
            for line in f.read_text(errors="replace").splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("Event") == "SparkListenerJobStart":
                    out.append((e.get("Properties") or {}).get("spark.job.description") or "")
    return out
