"""Index segments built by Spark tasks: one task per fragment group calls
``create_index_uncommitted(column, type, fragment_ids=[...], <model>)`` against the table at the
build's read version and hands the segment's metadata (a ``lance.dataset.Index``, about 600
bytes pickled) back through an accumulator, as the compaction's rewrite jobs do
(runtime/task_outcomes.py): when a task fails all its attempts, the driver still knows which
segments the others wrote (to remove them). Nothing is committed here (commit.py does).

Reused by ``optimize_indices``' incremental upkeep: :func:`build_segments` takes any groups and
any model (the index's existing one)."""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import lance
from pyspark import SparkContext, TaskContext

from ..errors import CompactionError
from ..runtime import cancellation, hooks
from ..runtime.cancellation import job_cancelled
from ..runtime.failures import describe, job_failure
from ..runtime.secrets import redact
from ..runtime.spark_jobs import request_tag, run_job, settle
from ..runtime.task_outcomes import drop as drop_outcomes, outcomes_accumulator

log = logging.getLogger(__name__)


# Types whose segment folder Lance names itself: pylance 14.0.2 refuses ``index_uuid`` for them
# ("index_uuid is no longer accepted for BTree distributed index builds"). A segment of one of
# these written by a task that ended after its job failed is unknown to the driver: the table's
# cleanup (delete_unverified) removes it.
NAMED_BY_LANCE = frozenset({"BTREE", "NGRAM", "LABEL_LIST"})


@dataclass(frozen=True)
class SegmentJob:
    """Everything a segment task needs (pickled into the job; the model through a broadcast).

    ``params``: ``create_index_uncommitted``'s keywords besides column, type, name and
    fragment ids: Lance's options and the model (num_partitions, ivf_centroids, pq_codebook,
    num_sub_vectors, rabitq_model); ``metric`` for a vector index. ``replace``: the index
    ``name`` exists and this build replaces it (Lance refuses an existing name without it)."""

    table: str
    uri: str
    storage_options: Mapping[str, str]
    version: int
    column: str
    index_type: str
    name: str
    params: Mapping[str, Any]
    metric: str | None = None
    replace: bool = False
    hooks: Mapping[str, Any] = field(default_factory=dict)
    # Names each segment's folder: uuid5(run, "<group>:<attempt>"), so the driver knows every
    # folder a task attempt may have written, also one that finished after its job failed (its
    # accumulator update is dropped then) and removes them (segment_uuids).
    run: str = field(default_factory=lambda: uuid.uuid4().hex)

    def segment_uuid(self, position: int, attempt: int) -> str | None:
        """The folder (``_indices/<uuid>``) attempt ``attempt`` of group ``position`` writes (None:
        Lance names it, :data:`NAMED_BY_LANCE`)."""
        if self.index_type in NAMED_BY_LANCE:
            return None
        return str(uuid.uuid5(uuid.UUID(self.run), f"{position}:{attempt}"))

    def segment_uuids(self, groups: int, attempts: int) -> list[str]:
        """Every folder ``groups`` groups of up to ``attempts`` attempts each may have written
        (none known for :data:`NAMED_BY_LANCE` types)."""
        return [u for p in range(groups) for a in range(attempts) if (u := self.segment_uuid(p, a))]


@dataclass(frozen=True)
class Segment:
    """One built, uncommitted segment: its group's place, the fragments it covers, Lance's
    metadata, the task's time, and the bytes Lance read and wrote building it (the task's
    dataset's I/O counters: what the segment's files hold, written)."""

    position: int
    fragment_ids: tuple[int, ...]
    index: Any  # lance.dataset.Index
    elapsed_ms: int
    bytes_read: int = 0
    bytes_written: int = 0


def io_since(ds: lance.LanceDataset) -> tuple[int, int]:
    """Bytes ``ds``'s object store read and wrote since the last call (pylance's
    io_stats_incremental, which also resets them): call once before the work to start at zero."""
    stats = ds.io_stats_incremental()
    return int(stats.read_bytes), int(stats.written_bytes)


@dataclass(frozen=True)
class SegmentFailure:
    """Why a segment job failed: cancelled, or a task failed all its attempts (said for the user)."""

    message: str
    cancelled: bool = False
    settled: bool = True


def build_one(ds: lance.LanceDataset, job: SegmentJob, fragment_ids: Sequence[int], params: Mapping[str, Any],
              index_uuid: str | None = None) -> Any:
    """One segment over ``fragment_ids`` of ``ds`` (at the job's version), not committed, in
    folder ``index_uuid`` (None: Lance picks one)."""
    kwargs = dict(params)
    if job.metric is not None:
        kwargs["metric"] = job.metric
    return ds.create_index_uncommitted(job.column, job.index_type, name=job.name, replace=job.replace,
                                       fragment_ids=list(fragment_ids), index_uuid=index_uuid, **kwargs)


class _Builder:
    """The executor's side: builds each group of its partition and reports it."""

    def __init__(self, job: SegmentJob, model: Any, pylance: str) -> None:
        self.job, self.model, self.pylance = job, model, pylance

    def __call__(self, outcomes: Any, rows: Iterator[tuple[int, tuple[int, ...]]]) -> Iterator[None]:
        from ..runtime.spark_jobs import background_priority
        from ..runtime.tables import open_dataset

        background_priority()  # a worker of background tasks only (run_job's background)
        job = self.job
        if lance.__version__ != self.pylance:  # segments of another pylance may not merge
            raise CompactionError(
                f"this executor runs pylance {lance.__version__} but the driver plans with pylance "
                f"{self.pylance}: run the same Python environment everywhere (spark.sql.execution.pyspark.python)")
        context = TaskContext.get()
        attempt = context.attemptNumber() if context else 0
        params = {**job.params, **(self.model.value if self.model is not None else {})}
        ds = None
        for position, fragment_ids in rows:
            started = time.monotonic()
            try:
                hooks.task_fault(dict(job.hooks), position, attempt)
                hooks.task_sleep(dict(job.hooks), position)
                ds = ds or open_dataset(job.table, job.uri, dict(job.storage_options), version=job.version)
                io_since(ds)  # the build's own bytes from here
                index = build_one(ds, job, fragment_ids, params, job.segment_uuid(position, attempt))
                read, wrote = io_since(ds)
            except CompactionError:
                raise
            except Exception as e:  # Spark logs a task's error on both sides: never a credential
                raise CompactionError(redact(f"table {job.table}: building the index segment of fragments "
                                             f"{_ids(fragment_ids)} failed: {describe(e)}", dict(job.storage_options))
                                      ) from None
            outcomes.add([Segment(position, tuple(fragment_ids), index, int((time.monotonic() - started) * 1000),
                                  read, wrote)])
        return iter(())


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids[:5])) + (f" (and {len(ids) - 5} more)" if len(ids) > 5 else "")


def build_segments(sc: SparkContext, job: SegmentJob, groups: Sequence[Sequence[int]], model: Mapping[str, Any] | None,
                   description: str) -> tuple[list[Segment], SegmentFailure | None]:
    """Build a segment per group of fragment ids as one Spark job (a task per group, the
    largest first is the caller's order), ``model`` broadcast to the tasks, the job described as
    ``description`` (``lance.create_index db.t: ...``). Returns the segments the finished tasks
    wrote (in group order) and the failure, if the job failed or was cancelled; after a failure
    no task of it still runs when this returns (bounded wait), so the caller may remove what
    was written."""
    items = [(i, tuple(g)) for i, g in enumerate(groups)]
    broadcast = sc.broadcast(dict(model)) if model else None
    outcomes = outcomes_accumulator(sc)
    builder = _Builder(job, broadcast, lance.__version__)
    sc.setJobDescription(description)
    failure = None
    try:
        run_job(sc.parallelize(items, max(1, len(items))).mapPartitions(lambda rows: builder(outcomes, rows)),
                background=True)
    except Exception as e:  # a task failed all its attempts, or the job was cancelled
        failure = _failure(e, job.table)
        if failure.cancelled:
            cancellation.cancel(failure.message)
        failure = SegmentFailure(failure.message, failure.cancelled, settle(sc, request_tag(sc)))
    finally:
        sc.setJobDescription(None)
        drop_outcomes(outcomes)
        if broadcast is not None:
            try:
                broadcast.destroy()
            except Exception as e:  # only memory: never fails the build
                log.debug("broadcast not destroyed: %s", e)
    done = sorted(outcomes.value, key=lambda s: s.position)
    log.info("table %s: %d segments built, task times %s ms", job.table, len(done), [s.elapsed_ms for s in done])
    return done, failure


def _failure(error: Exception, table: str) -> SegmentFailure:
    text = str(error)
    cancelled = job_cancelled(text)
    if cancelled:
        return SegmentFailure(cancelled, cancelled=True)
    from ..errors import MARKER
    if MARKER in text:
        return SegmentFailure(text[text.index(MARKER) + len(MARKER):].strip().splitlines()[0].strip())
    return SegmentFailure(f"table {table}: an index segment task failed: {job_failure(error)}")
