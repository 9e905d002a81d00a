"""One model for every segment of a vector index: IVF centroids (``IndicesBuilder.train_ivf``), a
PQ codebook (``train_pq``) or a RaBitQ rotation (``build_rq_model``), trained by ONE Spark task
on an executor from the table itself at the build's read version, Lance sampling its own
training vectors as its ``create_index`` does (``sample_rate`` per partition, over the build's
fragments). Only the model comes back to the driver (through an accumulator, about 160 KB for 316
centroids of 128-d), never a vector: the k-means runs where it can be cancelled and scheduled
beside other users' work, not in the driver's engine worker. Segments trained apart cannot be
merged (lance PR 6313): every segment gets this model.

Measured (issue 45, 100,000 x 128-d on an object store at 20 ms a request): the sample gathered
by Spark tasks and shipped to the driver as Arrow bytes (41 MB through an accumulator), then
written to a local dataset and trained there, took 2.0 s of which the reads were 0.5 s; this
task trains in about Lance's own time (its sampling reads coalesced, nothing shipped)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import lance
from lance.indices import IndicesBuilder
from pyspark import SparkContext

from ..errors import CompactionError
from ..runtime import hooks
from ..runtime.secrets import redact
from ..runtime.spark_jobs import run_job
from ..runtime.task_outcomes import drop as drop_outcomes, outcomes_accumulator
from .spec import PQ_TYPES, IndexRequest, num_sub_vectors

log = logging.getLogger(__name__)


def sample_rate(req: IndexRequest, rows: int, num_partitions: int, most: int) -> int:
    """Training vectors per IVF partition (and per PQ centroid): ``sample_rate`` given, else 256
    halved until ``num_partitions x rate`` (and ``2^num_bits x rate`` for PQ), at most the live
    ``rows``, is within ``most`` (the bound max_training_rows); one given and over it is refused."""
    rate = int(req.setting("sample_rate"))
    if min(rows, sampled_vectors(req, num_partitions, rate)) > most:
        if "sample_rate" in req.build:
            raise CompactionError(
                f"table {req.table}: create_index: refused by the bound max_training_rows: num_partitions "
                f"{num_partitions:,} x sample_rate {rate:,} would sample {sampled_vectors(req, num_partitions, rate):,} "
                f"vectors; at most {most:,} are allowed: lower sample_rate or num_partitions; nothing was built and "
                "the table is unchanged")
        while rate > 2 and sampled_vectors(req, num_partitions, rate) > most:
            rate //= 2
    return rate


def sample_size(req: IndexRequest, rows: int, num_partitions: int, most: int) -> int:
    """Vectors the training reads (:func:`sample_rate`'s rate times the partitions, or the PQ
    centroids when more), at most the table's live ``rows``."""
    return min(rows, sampled_vectors(req, num_partitions, sample_rate(req, rows, num_partitions, most)))


def sampled_vectors(req: IndexRequest, num_partitions: int, rate: int) -> int:
    """Vectors Lance samples to train at ``rate``: per partition, or per PQ centroid when more
    (before the table's rows cap it)."""
    bits = int(req.lance.get("num_bits") or 8)
    return max(num_partitions * rate, (1 << bits) * rate if req.index_type in PQ_TYPES else 0)


def train(req: IndexRequest, ds: lance.LanceDataset, num_partitions: int, rate: int, rows: int,
          fragment_ids: Sequence[int] | None = None) -> dict[str, Any]:
    """The model as ``create_index_uncommitted``'s keywords (num_partitions, ivf_centroids,
    pq_codebook, num_sub_vectors, rabitq_model), trained on ``ds`` (``rows`` live rows over
    ``fragment_ids``, None: every fragment), Lance sampling ``rate`` vectors a partition."""
    if rows < 2 * num_partitions:
        raise CompactionError(
            f"table {req.table}: create_index: {num_partitions:,} partitions need at least "
            f"{2 * num_partitions:,} vectors to train on, the table has {rows:,}: lower num_partitions; "
            "nothing was built and the table is unchanged")
    builder = IndicesBuilder(ds, req.column)
    iters = int(req.setting("max_iters"))
    ids = list(fragment_ids) if fragment_ids is not None else None
    # pylance's train_ivf and train_pq refuse a rate that needs more rows than there are (its
    # create_index then trains on every row): at most the rows
    ivf = builder.train_ivf(num_partitions, distance_type=(req.metric or "L2").lower(),
                            sample_rate=max(2, min(rate, rows // num_partitions)), max_iters=iters, fragment_ids=ids)
    model: dict[str, Any] = {"num_partitions": num_partitions, "ivf_centroids": ivf.centroids}
    if req.index_type in PQ_TYPES:
        bits = int(req.lance.get("num_bits") or 8)
        if rows < 2 << bits:
            raise CompactionError(
                f"table {req.table}: create_index: a {bits}-bit PQ codebook needs at least {2 << bits:,} "
                f"vectors to train on, the table has {rows:,}; nothing was built and the table is unchanged")
        sub = num_sub_vectors(req)
        pq = builder.train_pq(ivf, sub, sample_rate=max(2, min(rate, rows >> bits)), max_iters=iters, num_bits=bits,
                              fragment_ids=ids)
        model.update(pq_codebook=pq.codebook, num_sub_vectors=sub)
    elif req.index_type == "IVF_RQ":
        from lance.lance import indices as native
        model["rabitq_model"] = native.build_rq_model(dimension=req.dimension,
                                                      num_bits=int(req.lance.get("num_bits") or 5))
    return model


@dataclass(frozen=True)
class _Trainer:
    """What the training task needs (pickled into the job)."""

    req: IndexRequest
    uri: str
    storage_options: dict[str, str]
    version: int
    num_partitions: int
    rate: int
    rows: int
    fragment_ids: tuple[int, ...]
    pylance: str

    def __call__(self, outcomes: Any, items: Iterator[int]) -> Iterator[None]:
        from ..runtime.spark_jobs import background_priority
        from ..runtime.tables import open_dataset

        background_priority()  # heavy work: a worker of background tasks only (run_job's background)
        list(items)
        if lance.__version__ != self.pylance:  # a model of another pylance may not fit its segments
            raise CompactionError(
                f"this executor runs pylance {lance.__version__} but the driver plans with pylance "
                f"{self.pylance}: run the same Python environment everywhere (spark.sql.execution.pyspark.python)")
        hooks.task_sleep(dict(self.req.hooks), 0)  # tests: a cancel while the model is trained
        ds = open_dataset(self.req.table, self.uri, self.storage_options, version=self.version)
        try:
            model = train(self.req, ds, self.num_partitions, self.rate, self.rows, self.fragment_ids)
        except CompactionError:
            raise
        except Exception as e:  # never a credential in a task's error (Spark logs it)
            raise RuntimeError(redact(f"{type(e).__name__}: {e}", self.storage_options)) from None
        outcomes.add([model])
        return iter(())


def train_on_executor(sc: SparkContext, req: IndexRequest, uri: str, storage_options: dict[str, str], version: int,
                      num_partitions: int, rate: int, rows: int, fragment_ids: Sequence[int],
                      description: str) -> dict[str, Any]:
    """The model (:func:`train`) of ``fragment_ids`` at ``version``, trained by one Spark task (a
    background job of the request, described as ``description``). Raises the job's failure."""
    trainer = _Trainer(req, uri, dict(storage_options), version, num_partitions, rate, rows, tuple(fragment_ids),
                       lance.__version__)
    outcomes = outcomes_accumulator(sc)
    sc.setJobDescription(description)
    try:
        run_job(sc.parallelize([0], 1).mapPartitions(lambda items: trainer(outcomes, items)), background=True)
    finally:
        sc.setJobDescription(None)
        drop_outcomes(outcomes)
    if not outcomes.value:
        raise CompactionError(f"table {req.table}: create_index: the training task reported no model; nothing was "
                              "committed")
    return outcomes.value[0]
