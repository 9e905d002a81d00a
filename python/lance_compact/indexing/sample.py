"""A bounded training sample of a vector column, gathered by Spark tasks on executors (never
the whole column on the driver): each task takes its fragments' share of the sample at random
live-row offsets (``LanceFragment.take``, which counts live rows only) and hands it back as
Arrow IPC bytes through an accumulator; the driver holds only the sample."""
from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext

from ..runtime.secrets import redact
from ..runtime.spark_jobs import run_job
from ..runtime.task_outcomes import drop as drop_outcomes, outcomes_accumulator
from .plan import Group

log = logging.getLogger(__name__)


def quotas(groups: Sequence[Group], rows_by_fragment: dict[int, int], size: int) -> dict[int, int]:
    """Rows to take from each fragment, in proportion to its live rows (largest remainders),
    ``size`` in all (every row when the table holds fewer)."""
    total = sum(rows_by_fragment.values())
    if size >= total:
        return dict(rows_by_fragment)
    exact = {f: size * r / total for f, r in rows_by_fragment.items()}
    out = {f: math.floor(x) for f, x in exact.items()}
    short = size - sum(out.values())
    for f in sorted(exact, key=lambda f: out[f] - exact[f])[:short]:
        out[f] += 1
    return out


@dataclass(frozen=True)
class _Sampler:
    """What a sampling task needs (pickled into the job)."""

    table: str
    uri: str
    storage_options: dict[str, str]
    version: int
    column: str
    seed: int

    def __call__(self, outcomes: Any, rows: Iterator[list[tuple[int, int]]]) -> Iterator[None]:
        from ..runtime.tables import open_dataset

        ds = open_dataset(self.table, self.uri, self.storage_options, version=self.version)
        for part in rows:
            for fragment_id, quota in part:
                try:
                    outcomes.add([(fragment_id, _take(ds, fragment_id, quota, self.column, self.seed))])
                except Exception as e:  # never a credential in a task's error (Spark logs it)
                    raise RuntimeError(redact(f"{type(e).__name__}: {e}", self.storage_options)) from None
        return iter(())


def _take(ds: Any, fragment_id: int, quota: int, column: str, seed: int) -> bytes:
    fragment = ds.get_fragment(fragment_id)
    live = fragment.count_rows()
    if quota <= 0 or live == 0:
        return b""
    rng = np.random.default_rng([seed, fragment_id])
    offsets = np.arange(live) if quota >= live else np.sort(rng.choice(live, size=quota, replace=False))
    table = fragment.take(offsets.tolist(), columns=[column])
    table = table.filter(pc.is_valid(table.column(column)))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def gather(sc: SparkContext, table: str, uri: str, storage_options: dict[str, str], version: int,
           column: str, groups: Sequence[Group], rows_by_fragment: dict[int, int], size: int,
           description: str, seed: int = 7) -> pa.Table:
    """A sample of about ``size`` non-null values of ``column`` at ``version`` as one Spark job
    (a task per group, ``description`` naming the procedure and table); the rows in fragment
    order. Raises the job's failure."""
    share = quotas(groups, rows_by_fragment, size)
    parts = [[(f, share.get(f, 0)) for f in g.fragment_ids if share.get(f, 0) > 0] for g in groups]
    parts = [p for p in parts if p]
    sampler = _Sampler(table, uri, dict(storage_options), version, column, seed)
    outcomes = outcomes_accumulator(sc)
    sc.setJobDescription(description)
    try:
        run_job(sc.parallelize(parts, max(1, len(parts))).mapPartitions(lambda rows: sampler(outcomes, rows)))
    finally:
        sc.setJobDescription(None)
        drop_outcomes(outcomes)
    tables = [pa.ipc.open_stream(data).read_all() for _, data in sorted(outcomes.value) if data]
    return pa.concat_tables(tables) if tables else pa.table({column: pa.array([])})
