"""``CALL lance.create_index``: the run. The request is checked against the table (spec.py)
before anything is read; the fragments are grouped (plan.py); for a vector index a bounded
sample is gathered by Spark tasks (sample.py) and one model trained from it on the driver
(train.py); a Spark task per group builds its segment with that model (segments.py); the driver
merges them with bounded fan-in and commits once against the read version (commit.py). A
concurrent writer that rewrote indexed fragments makes the commit conflict: the groups whose
fragments changed are planned and built again on the new version (``max_retries`` times), the
rest kept. Any failure removes the segment files written and says that nothing was committed.

A small build in local mode runs in the engine instead, as pylance's own ``create_index`` (the
compaction's rule, ``spark.lance.compact.engineRewrite.maxBatchBytes``: 256 MiB of the column in local
mode by default, 0 on a cluster); with 0, every build is Spark tasks. The row's ``built_by`` says
which."""
from __future__ import annotations

import logging
import math
import time
from types import SimpleNamespace
from typing import Any

import lance

from ..errors import CompactionError
from ..runtime import cancellation, driver_conf, hooks, progress
from ..runtime.cancellation import Cancelled
from ..runtime.driver_conf import max_task_attempts
from ..runtime.envelope import Envelope, Target
from ..runtime.failures import classify, committed_phrase
from . import sample as sampling
from . import spec as specs
from .commit import commit_segments, is_conflict, merge_segments, remove_unreferenced, unchanged
from .plan import Group, allowed, plan_groups, value_bytes
from .segments import SegmentJob, build_segments
from .train import sample_size, train

log = logging.getLogger(__name__)

SPARK, ENGINE = "spark tasks", "engine"


def engine_limit(sc: Any) -> int:
    """The largest build (estimated bytes of the column) done in the engine: compaction's rule and
    setting (``driver_conf.engine_limit``: ``spark.lance.compact.engineRewrite.maxBatchBytes``,
    else 256 MiB in local mode and 0 on a cluster)."""
    return driver_conf.engine_limit(sc)


def check(request: Envelope) -> tuple[Target, lance.LanceDataset, specs.IndexRequest]:
    """The table, opened, and the request checked against it (nothing read beyond metadata)."""
    target = request.require_target()
    specs.check_names(target.table, request.args)  # before the table is opened or anything logged
    ds = target.open()
    existing = {i.name: list(i.field_names) for i in ds.describe_indices()}
    return target, ds, specs.parse(target.table, ds.schema, existing, request.args, request.options)


def num_partitions(req: specs.IndexRequest, rows: int) -> int | None:
    """IVF partitions: given, else the square root of the live rows (IndicesBuilder's default);
    at most half the live rows (each partition trains on at least two vectors)."""
    if not req.is_vector:
        return None
    n = req.lance.get("num_partitions") or max(1, round(math.sqrt(rows)))
    if 2 * n > rows:
        raise CompactionError(
            f"table {req.table}: create_index: num_partitions {n:,} needs at least {2 * n:,} live rows; the table "
            f"has {rows:,}: lower num_partitions; nothing was built and the table is unchanged")
    return int(n)


# The training sample the driver holds, in bytes, whatever the rows bound allows (2,097,152 vectors
# of 1,536 float32 would be 12 GiB): 1 GiB, 262,144 such vectors.
MAX_SAMPLE_BYTES = 1 << 30


def training_rows(req: specs.IndexRequest, ds: lance.LanceDataset, rows: int) -> int:
    """The most vectors a training sample may hold: the bound max_training_rows, and at most
    :data:`MAX_SAMPLE_BYTES` of them."""
    width = value_bytes(ds.schema.field(req.column).type) or 1
    return max(1, min(allowed("max_training_rows", rows), MAX_SAMPLE_BYTES // width))


def create_index(request: Envelope, sc: Any) -> dict[str, Any]:
    """Build (or with dry_run, plan) the index ``request`` asks for; its row by column name
    (parameters.json ``create_index_columns``)."""
    started = time.monotonic()
    target, ds, req = check(request)
    read_version = ds.version
    groups = plan_groups(ds, req.column, req.build, sc.defaultParallelism)
    rows = sum(g.rows for g in groups)
    if rows == 0:
        raise CompactionError(f"table {req.table}: create_index: the table has no rows to index; nothing was "
                              "built and the table is unchanged")
    partitions = num_partitions(req, rows)
    sample_rows = sample_size(req, rows, partitions, training_rows(req, ds, rows)) if req.is_vector else 0
    in_engine = (not req.hooks and sum(g.estimated_bytes for g in groups) <= engine_limit(sc)) \
        or req.index_type not in specs.SEGMENTED
    row = {"table": req.table, "name": req.name, "index_type": req.index_type, "column": req.column,
           "dry_run": req.dry_run, "built_by": ENGINE if in_engine else SPARK, "read_version": read_version,
           "new_version": read_version, "fragments": sum(len(g.fragment_ids) for g in groups), "rows": rows,
           "estimated_bytes": sum(g.estimated_bytes for g in groups), "segments_built": 0,
           "segments_committed": 0, "sample_rows": 0 if in_engine and not req.dry_run else sample_rows,
           "retries": 0, "groups": [g.as_row() for g in groups], "train_ms": 0, "build_ms": 0, "commit_ms": 0}
    if not req.dry_run:
        why = cancellation.reason()
        if why:
            raise Cancelled(f"table {req.table}: create_index cancelled ({why}); nothing was built or committed")
        if in_engine:
            _in_engine(ds, req, partitions, row)
        else:
            _on_spark(sc, target, ds, req, groups, partitions, sample_rows, row)
    row["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    return row


def _in_engine(ds: lance.LanceDataset, req: specs.IndexRequest, partitions: int | None, row: dict[str, Any]) -> None:
    """pylance's own create_index in this process (one commit)."""
    progress.report(f"{req.table}: create_index: building {req.name} in the engine")
    clock = time.monotonic()
    try:
        if req.is_vector:
            extra = {k: v for k, v in req.build.items() if k in ("sample_rate", "max_iters")}
            rest = {k: v for k, v in req.lance.items() if k not in ("num_partitions", "num_sub_vectors")}
            ds.create_index(req.column, req.index_type, name=req.name, metric=req.metric, replace=req.replace,
                            num_partitions=partitions, num_sub_vectors=specs.num_sub_vectors(req),
                            **rest, **extra)
        else:
            ds.create_scalar_index(req.column, req.index_type, name=req.name, replace=req.replace, **req.lance)
    except Exception as e:
        raise CompactionError(f"table {req.table}: create_index: pylance's create_index failed: "
                              f"{classify(e).phrase} ({classify(e).detail}); nothing was committed") from None
    row["new_version"] = ds.latest_version
    row["build_ms"] = int((time.monotonic() - clock) * 1000)
    row["segments_built"] = row["segments_committed"] = 1


def _lance_params(req: specs.IndexRequest) -> dict[str, Any]:
    """Lance's keywords for each segment, besides the model."""
    return dict(req.lance)


def _on_spark(sc: Any, target: Target, ds: lance.LanceDataset, req: specs.IndexRequest, groups: list[Group],
              partitions: int | None, sample_rows: int, row: dict[str, Any]) -> None:
    """Sample and train (vector), segments on executors, merge and commit; re-plan after a
    conflict. Fills ``row``."""
    table = req.table
    model: dict[str, Any] | None = None
    clock = time.monotonic()
    if req.is_vector:
        progress.report(f"{table}: create_index: sampling {sample_rows:,} vectors")
        rows_by_fragment = {f: 0 for g in groups for f in g.fragment_ids}
        for f in ds.get_fragments():
            if f.fragment_id in rows_by_fragment:
                rows_by_fragment[f.fragment_id] = f.count_rows()
        try:
            sample = sampling.gather(
                sc, table, target.uri, dict(target.storage_options), ds.version, req.column, groups, rows_by_fragment,
                sample_rows, f"lance.create_index {table}: sampling {sample_rows:,} vectors of {req.column} "
                             f"from {len(rows_by_fragment)} fragments")
        except Exception as e:
            raise _job_error(table, e, "sampling the training vectors") from None
        row["sample_rows"] = sample.num_rows
        progress.report(f"{table}: create_index: training on {sample.num_rows:,} vectors")
        model = train(req, sample, partitions)
        del sample
    row["train_ms"] = int((time.monotonic() - clock) * 1000)
    written: list[str] = []  # every segment uuid built or merged: those not committed are removed
    kept: list[Any] = []  # segments still valid across re-plans
    read = ds
    try:
        for attempt in range(int(req.setting("max_retries")) + 1):
            _check_cancel(table, "before building the segments")
            job = SegmentJob(table, target.uri, dict(target.storage_options), read.version, req.column,
                             req.index_type, req.name, _lance_params(req), req.metric, req.replace, dict(req.hooks))
            progress.report(f"{table}: create_index: building {len(groups)} segments")
            clock = time.monotonic()
            built, failure = build_segments(
                sc, job, [g.fragment_ids for g in groups], model,
                f"lance.create_index {table}: building {len(groups)} {req.index_type} segments of {req.name} "
                f"planned at version {read.version}" + (f" (retry {attempt})" if attempt else ""))
            row["build_ms"] += int((time.monotonic() - clock) * 1000)
            row["segments_built"] += len(built)
            written += [str(s.index.uuid) for s in built]
            if failure is not None:  # a task may have written its segment after the job failed
                written += job.segment_uuids(len(groups), max_task_attempts(sc))
                if failure.cancelled:
                    # the statement's own cancel ("job group g", "interrupted") says more than Spark's job
                    why = cancellation.reason() or failure.message
                    raise Cancelled(f"table {table}: create_index cancelled ({why}); nothing was committed")
                raise CompactionError(f"{failure.message}; nothing was committed")
            segments = kept + built
            hooks.before_commit(SimpleNamespace(hooks=req.hooks, uri=target.uri,
                                                storage_options=dict(target.storage_options)))
            _check_cancel(table, "before the commit")  # after the hook: a test's pause is when it is sent
            progress.report(f"{table}: create_index: merging and committing {len(segments)} segments")
            clock = time.monotonic()
            merged = merge_segments(read, [s.index for s in sorted(segments, key=lambda s: min(s.fragment_ids))],
                                    int(req.setting("merge_fan_in")), req.index_type)
            written += [str(m.uuid) for m in merged]
            try:
                row["new_version"] = commit_segments(read, req.name, req.column, merged)
                row["segments_committed"] = len(merged)
                row["commit_ms"] += int((time.monotonic() - clock) * 1000)
                row["groups"] = [g.as_row() for g in groups] if not kept else row["groups"]
                return
            except Exception as e:
                row["commit_ms"] += int((time.monotonic() - clock) * 1000)
                if not is_conflict(e) or attempt == int(req.setting("max_retries")):
                    raise CompactionError(f"table {table}: create_index: the commit failed: {classify(e).phrase} "
                                          f"({classify(e).detail}); nothing was committed") from None
                latest = target.open()
                kept = [s for s in segments if unchanged(read, latest, s.fragment_ids)]
                covered = {f for s in kept for f in s.fragment_ids}
                groups = plan_groups(latest, req.column, req.build, sc.defaultParallelism,
                                     only={f.fragment_id for f in latest.get_fragments()} - covered)
                log.info("table %s: create_index: the commit met a concurrent writer (%s); %d segments kept, %d "
                         "groups to build again at version %d", table, classify(e).operation, len(kept),
                         len(groups), latest.version)
                row["retries"] += 1
                read = latest
    finally:
        remove_unreferenced(target, written, "create_index")


def _check_cancel(table: str, where: str) -> None:
    why = cancellation.reason()
    if why:
        raise Cancelled(f"table {table}: create_index cancelled {where} ({why}); nothing was committed")


def _job_error(table: str, e: Exception, what: str) -> CompactionError:
    from ..runtime.cancellation import job_cancelled
    from ..runtime.failures import job_failure

    cancelled = job_cancelled(str(e))
    if cancelled:
        cancellation.cancel(cancelled)
        why = cancellation.reason() or cancelled
        return Cancelled(f"table {table}: create_index cancelled while {what} ({why}); nothing was committed")
    if isinstance(e, CompactionError):
        return e
    return CompactionError(f"table {table}: create_index: {what} failed: {job_failure(e)}; nothing was committed")
