"""``CALL lance.create_index``: the run. The request is checked against the table (spec.py)
before anything is read; the fragments are grouped (plan.py); for a vector index of several
groups one Spark task trains one model from a bounded sample of the table (train.py); a Spark
task per group builds its segment with that model (segments.py); the driver merges them with
bounded fan-in and commits once against the read version (commit.py). A vector index of ONE
group is built by one Spark task that trains its own model, as pylance's ``create_index`` does:
no training job, no second read of the vectors (on an object store that job was a third of the
build). On an
object store IVF_FLAT, IVF_HNSW_FLAT, IVF_PQ and IVF_RQ segments (at most tiers.MAX_SEGMENTS, no
``merge_fan_in`` given) are committed as they are (commit.keep_unmerged: pylance's merge of them
is a chain of round trips there). A
concurrent writer that rewrote indexed fragments makes the commit conflict: the groups whose
fragments changed are planned and built again on the new version (``max_retries`` times), the
rest kept. Any failure removes the segment files written and says that nothing was committed.

A small, cheap build runs in the statement's engine worker instead, as one segment over every
fragment (``create_index_uncommitted``, Lance training its own model as its ``create_index``
does), committed through the commit gate like the segments of Spark tasks: nothing of it commits
after a cancel. "Small" is three bounds (runtime/driver_conf.py): the column's estimated bytes
(``spark.lance.compact.index.engineMaxBytes``, 8 MiB, and at most the compaction's
``engineRewrite.maxBatchBytes``: 0 on a cluster), the build's modelled CPU (cost.py:
``spark.lance.compact.index.engineMaxSeconds``, 10 s: HNSW's m and ef_construction, many
partitions for the rows, PQ codebooks make a build cost far more than its rows), and a time
limit (``spark.lance.compact.index.engineTimeout``, 120 s) past which the statement cancels
itself (its worker, still inside Lance's build, is killed at the cancel grace; the pool removes
the segment folder it staged). Anything larger runs as Spark tasks. SQ types, whose segments
cannot be merged (spec.SEGMENTED), run as ONE Spark task over every fragment when they are too
large for the worker. The row's ``built_by`` says where."""
from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import lance

from ..errors import CompactionError
from ..runtime import cancellation, commit_gate, cost_records, driver_conf, hooks, progress
from ..runtime.cancellation import Cancelled
from ..runtime.driver_conf import max_task_attempts
from ..runtime.envelope import Envelope, Target
from ..runtime.failures import classify, committed_phrase
from . import cost
from . import spec as specs
from . import tiers
from .commit import commit_segments, is_conflict, keep_unmerged, merge_segments, remove_unreferenced, unchanged
from .plan import Group, allowed, decoded_within, plan_groups, value_bytes
from .segments import NAMED_BY_LANCE, SegmentJob, build_one, build_segments, io_since
from .train import sample_rate, sample_size, sampled_vectors, train_on_executor

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


# The training sample the training task holds, in bytes, whatever the rows bound allows (2,097,152
# vectors of 1,536 float32 would be 12 GiB): 1 GiB, 174,762 such vectors.
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
    most_sampled = training_rows(req, ds, rows) if req.is_vector else 0
    sample_rows = sample_size(req, rows, partitions, most_sampled) if req.is_vector else 0
    limits = driver_conf.index_engine_limits(sc)
    column_bytes = sum(g.estimated_bytes for g in groups)
    modelled = cost.seconds(cost.build_work(req.index_type, rows, req.dimension, {**req.lance, **req.build},
                                            partitions))
    # test hooks act in Spark tasks (task faults, sleeps): such a build always runs there
    most = min(engine_limit(sc), limits[driver_conf.INDEX_MAX_BYTES])
    in_engine = (not req.hooks and column_bytes <= most and modelled <= limits[driver_conf.INDEX_MAX_SECONDS]
                 and decoded_within(ds, req.column, most))  # text: its files' bytes say little
    if not in_engine and req.index_type not in specs.SEGMENTED:  # one task: SQ segments cannot be merged
        groups = [Group(tuple(f for g in groups for f in g.fragment_ids), rows, column_bytes)]
    log.info("table %s: create_index: %s of %d rows, %d bytes of the column, modelled %.1f s of CPU: %s", req.table,
             req.index_type, rows, column_bytes, modelled, "in the engine worker" if in_engine else "Spark tasks")
    row = {"table": req.table, "name": req.name, "index_type": req.index_type, "column": req.column,
           "dry_run": req.dry_run, "built_by": ENGINE if in_engine else SPARK, "read_version": read_version,
           "new_version": read_version, "fragments": sum(len(g.fragment_ids) for g in groups), "rows": rows,
           "estimated_bytes": sum(g.estimated_bytes for g in groups), "segments_built": 0,
           "segments_committed": 0, "sample_rows": sample_rows if _trained(req, in_engine, len(groups)) else 0,
           "retries": 0, "groups": [g.as_row() for g in groups], "train_ms": 0, "build_ms": 0, "commit_ms": 0}
    if not req.dry_run:
        why = cancellation.reason()
        if why:
            raise Cancelled(f"table {req.table}: create_index cancelled ({why}); nothing was built or committed")
        if in_engine:
            _in_engine(target, ds, req, partitions, row, limits[driver_conf.INDEX_TIMEOUT],
                       [f for g in groups for f in g.fragment_ids])
        else:
            _on_spark(sc, target, ds, req, groups, partitions, most_sampled, row)
    row["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    for key in _COST_KEYS:  # kept with the table (_keep_cost), not columns of the result
        row.pop(key, None)
    return row


def _trained(req: specs.IndexRequest, in_engine: bool, groups: int) -> bool:
    """Whether the build trains one model in a Spark task of its own before its segments
    (segmented vector builds of several groups on Spark; in the worker, in a single group's task
    and in SQ's single task, Lance trains as its create_index does)."""
    return req.is_vector and not in_engine and req.index_type in specs.SEGMENTED and groups > 1


def _whole_params(req: specs.IndexRequest, partitions: int | None, rate: int | None = None) -> dict[str, Any]:
    """Lance's keywords for one segment over every fragment that trains its own model, as
    pylance's create_index is given them (``rate``: the sample_rate to train with, when the bound
    max_training_rows lowered it; else the one given, if any)."""
    if not req.is_vector:
        return dict(req.lance)
    rest = {k: v for k, v in req.lance.items() if k not in ("num_partitions", "num_sub_vectors")}
    extra = {k: v for k, v in req.build.items() if k in ("sample_rate", "max_iters")}
    if rate is not None and rate != int(req.setting("sample_rate")):
        extra["sample_rate"] = rate
    sub = specs.num_sub_vectors(req)
    return {**rest, **extra, "num_partitions": partitions, **({"num_sub_vectors": sub} if sub else {})}


def _in_engine(target: Target, ds: lance.LanceDataset, req: specs.IndexRequest, partitions: int | None,
               row: dict[str, Any], timeout: float, fragment_ids: list[int]) -> None:
    """One uncommitted segment over ``fragment_ids`` (every fragment the plan found), built in this
    worker (bounded by ``timeout`` seconds: past it the statement cancels itself), committed
    through the gate."""
    table, uri, storage = req.table, target.uri, dict(target.storage_options)
    progress.report(f"{table}: create_index: building {req.name} in the engine")
    clock = time.monotonic()
    folder = None if req.index_type in NAMED_BY_LANCE else str(uuid.uuid4())
    job = SegmentJob(table, uri, storage, ds.version, req.column, req.index_type, req.name,
                     _whole_params(req, partitions), req.metric, req.replace)
    written: list[str] = []
    if folder is not None:  # staged before Lance writes it: a killed worker's folder is removed by the pool
        written.append(folder)
        commit_gate.add(uri, [f"_indices/{folder}"], storage)
    try:
        try:
            segment = run_bounded(lambda: _measured(ds, lambda: build_one(ds, job, fragment_ids, job.params, folder),
                                                    row), timeout, table)
            if folder is None:  # Lance named it: known only now
                written.append(str(segment.uuid))
                commit_gate.add(uri, [f"_indices/{segment.uuid}"], storage)
            merged = _measured(ds, lambda: merge_segments(ds, [segment], 2, req.index_type), row)
        except (Cancelled, CompactionError):
            raise
        except Exception as e:
            raise CompactionError(f"table {table}: create_index: building the index in the engine failed: "
                                  f"{classify(e).phrase} ({classify(e).detail}); nothing was committed") from None
        written += [str(m.uuid) for m in merged if str(m.uuid) not in written]
        commit_gate.add(uri, [f"_indices/{m.uuid}" for m in merged], storage)
        row["build_ms"] = int((time.monotonic() - clock) * 1000)
        row["_task_ms"] = row["build_ms"]  # one worker process built it
        hooks.before_commit(SimpleNamespace(hooks=req.hooks, uri=uri, storage_options=storage))
        clock = time.monotonic()
        row["new_version"] = _commit(ds, req, merged)
        row["commit_ms"] = int((time.monotonic() - clock) * 1000)
        _keep_cost(req, uri, storage, row)
        row["segments_built"] = row["segments_committed"] = 1
    finally:
        remove_unreferenced(target, written, "create_index")
        commit_gate.stage(uri, [])  # committed, removed, or (not removable) left for cleanup


def run_bounded(build: Any, timeout: float | None, table: str, what: str = "create_index") -> Any:
    """``build()`` (an index build in this worker; ``what``: the procedure) on a thread of its own,
    waited for at most ``timeout`` seconds (None: no bound); past it the statement cancels itself:
    no commit of it begins, and its worker, still inside Lance's build, is killed at the cancel
    grace (the pool then removes what it staged). A cancel of the statement meanwhile is waited
    out the same way: Lance's build cannot be stopped, the kill stops it."""
    done: list[Any] = []
    failed: list[BaseException] = []
    statement = cancellation.current_probe()

    def run() -> None:
        with cancellation.serving(statement):
            try:
                done.append(build())
            except BaseException as e:  # noqa: B036 - handed to the waiting thread
                failed.append(e)

    worker = threading.Thread(target=run, daemon=True, name="index-build")
    worker.start()
    worker.join(timeout)
    if worker.is_alive() and timeout is not None:
        why = (f"the index build in the engine ran past its time limit of {timeout:g} s "
               f"({driver_conf.INDEX_TIMEOUT})")
        log.warning("table %s: %s: %s: cancelling the statement", table, what, why)
        cancellation.cancel_statement(why)
        worker.join()
    if failed:
        raise failed[0]
    why = cancellation.reason()
    if why:
        raise Cancelled(f"table {table}: {what} cancelled while building ({why}); nothing was committed")
    return done[0]


def _commit(ds: lance.LanceDataset, req: specs.IndexRequest, segments: list[Any], earlier: tuple[int, ...] = ()
            ) -> int:
    """``segments`` committed as index ``req.name`` against ``ds``'s version, through the gate:
    the version it landed."""
    with commit_gate.gate(req.table, f"create_index of {req.name}", earlier) as landed:
        try:
            version = commit_segments(ds, req.name, req.column, segments)
        except Exception as e:
            if is_conflict(e):
                raise
            raise CompactionError(f"table {req.table}: create_index: the commit failed: {classify(e).phrase} "
                                  f"({classify(e).detail}); nothing was committed") from None
        landed(f"version {version}")
        return version


# The build's measured cost in its result row until it is kept (removed before the row is returned).
_COST_KEYS = ("_bytes_read", "_bytes_written", "_task_ms")


def _add(row: dict[str, Any], read: int, wrote: int, task_ms: int = 0) -> None:
    """Count bytes and task time into ``row``, and say the bytes so far (the Lance tab's Running page)."""
    for key, n in zip(_COST_KEYS, (read, wrote, task_ms)):
        row[key] = row.get(key, 0) + int(n)
    progress.figures({"kind": "progress", "bytes_read": row["_bytes_read"], "bytes_written": row["_bytes_written"]})


def _measured(ds: lance.LanceDataset, work: Any, row: dict[str, Any]) -> Any:
    """``work()``, the bytes ``ds``'s object store read and wrote meanwhile added to ``row``
    (this statement's own dataset object: nothing else uses its counters meanwhile)."""
    io_since(ds)
    try:
        return work()
    finally:
        _add(row, *io_since(ds))


def _keep_cost(req: specs.IndexRequest, uri: str, storage: dict[str, str], row: dict[str, Any]) -> None:
    """The build's cost kept with the table under the version it committed (cost_records.py):
    the bytes Lance read and wrote building and merging the segments (each task's or this
    worker's dataset I/O counters: what was written is the segments' files, those merged away
    included), the tasks' time (a build in this worker: its build time), and the elapsed time
    building and committing. A vector model trained by a Spark job first is not in the bytes or
    task time (its sample is read by that job)."""
    cost_records.record(req.table, uri, storage, cost_records.Cost(
        version=row["new_version"], step="index build", bytes_read=row.get("_bytes_read"),
        bytes_written=row.get("_bytes_written"), task_ms=row.get("_task_ms"),
        elapsed_ms=int(row.get("build_ms") or 0) + int(row.get("commit_ms") or 0)))


def _lance_params(req: specs.IndexRequest) -> dict[str, Any]:
    """Lance's keywords for each segment, besides the model."""
    return dict(req.lance)


def _on_spark(sc: Any, target: Target, ds: lance.LanceDataset, req: specs.IndexRequest, groups: list[Group],
              partitions: int | None, most_sampled: int, row: dict[str, Any]) -> None:
    """Train (a vector index of several groups), segments on executors, merge and commit;
    re-plan after a conflict. ``most_sampled``: the training vectors allowed (the bound
    max_training_rows). Fills ``row``."""
    table = req.table
    model: dict[str, Any] | None = None
    written: list[str] = []  # every segment uuid built or merged: those not committed are removed
    kept: list[Any] = []  # segments still valid across re-plans
    read = ds
    try:
        for attempt in range(int(req.setting("max_retries")) + 1):
            _check_cancel(table, "before building the segments")
            rows = sum(g.rows for g in groups)
            rate = sample_rate(req, rows, partitions, most_sampled) if req.is_vector else None
            if model is None and _trained(req, False, len(groups)):
                model = _train(sc, target, read, req, groups, partitions, rate, row)
            if req.index_type not in specs.SEGMENTED or (req.is_vector and model is None):
                params = _whole_params(req, partitions, rate)  # one task over every group: Lance trains
            else:
                params = _lance_params(req)
            job = SegmentJob(table, target.uri, dict(target.storage_options), read.version, req.column,
                             req.index_type, req.name, params, req.metric, req.replace, dict(req.hooks))
            # every folder a task attempt may write, staged before the job: a dead worker's are the pool's to remove
            _stage(target, job.segment_uuids(len(groups), max_task_attempts(sc)))
            progress.report(f"{table}: create_index: building {len(groups)} segments")
            clock = time.monotonic()
            built, failure = build_segments(
                sc, job, [g.fragment_ids for g in groups], model,
                f"lance.create_index {table}: building {len(groups)} {req.index_type} segments of {req.name} "
                f"planned at version {read.version}" + (f" (retry {attempt})" if attempt else ""))
            row["build_ms"] += int((time.monotonic() - clock) * 1000)
            row["segments_built"] += len(built)
            for s in built:  # what each task measured (segments.Segment)
                _add(row, s.bytes_read, s.bytes_written, s.elapsed_ms)
            written += [str(s.index.uuid) for s in built]
            _stage(target, [str(s.index.uuid) for s in built])
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
            clock = time.monotonic()
            ordered = [s.index for s in sorted(segments, key=lambda s: min(s.fragment_ids))]
            if "merge_fan_in" not in req.build and keep_unmerged(target.uri, req.index_type, len(ordered),
                                                                 tiers.MAX_SEGMENTS):
                progress.report(f"{table}: create_index: committing {len(segments)} segments")
                merged = ordered  # their merge on an object store: a round trip per partition per segment
            else:
                progress.report(f"{table}: create_index: merging and committing {len(segments)} segments")
                merged = _measured(read, lambda: merge_segments(read, ordered, int(req.setting("merge_fan_in")),
                                                                req.index_type), row)
            written += [str(m.uuid) for m in merged]
            _stage(target, [str(m.uuid) for m in merged])
            try:
                row["new_version"] = _commit(read, req, merged)
                row["segments_committed"] = len(merged)
                row["commit_ms"] += int((time.monotonic() - clock) * 1000)
                row["groups"] = [g.as_row() for g in groups] if not kept else row["groups"]
                _keep_cost(req, target.uri, dict(target.storage_options), row)
                return
            except CompactionError:  # the gate's refusal (a cancel), or the commit's own failure, said
                raise
            except Exception as e:
                row["commit_ms"] += int((time.monotonic() - clock) * 1000)
                if not is_conflict(e) or attempt == int(req.setting("max_retries")):
                    raise CompactionError(f"table {table}: create_index: the commit failed: {classify(e).phrase} "
                                          f"({classify(e).detail}); nothing was committed") from None
                latest = target.open()
                kept = [s for s in segments if unchanged(read, latest, s.fragment_ids)]
                if req.is_vector and model is None:  # a segment that trained its own model stands alone
                    kept = []
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
        commit_gate.stage(target.uri, [])  # committed, removed, or (not removable) left for cleanup


def _train(sc: Any, target: Target, read: lance.LanceDataset, req: specs.IndexRequest, groups: list[Group],
           partitions: int | None, rate: int | None, row: dict[str, Any]) -> dict[str, Any]:
    """One model for every segment, trained by a Spark task from ``groups``' fragments at
    ``read``'s version (train.py); its time and sample size go into ``row``."""
    table = req.table
    rows = sum(g.rows for g in groups)
    sampled = min(rows, sampled_vectors(req, int(partitions or 1), int(rate or 1)))
    clock = time.monotonic()
    progress.report(f"{table}: create_index: training on {sampled:,} sampled vectors")
    try:
        model = train_on_executor(
            sc, req, target.uri, dict(target.storage_options), read.version, int(partitions or 1), int(rate or 1),
            rows, [f for g in groups for f in g.fragment_ids],
            f"lance.create_index {table}: training {req.index_type} on {sampled:,} sampled vectors of {req.column}")
    except Exception as e:
        raise _job_error(table, e, "training the model") from None
    row["sample_rows"] = sampled
    row["train_ms"] += int((time.monotonic() - clock) * 1000)
    log.info("table %s: create_index: model trained by a Spark task on %d sampled vectors in %d ms", table, sampled,
             row["train_ms"])
    return model


def _stage(target: Target, uuids: list[str]) -> None:
    commit_gate.add(target.uri, [f"_indices/{u}" for u in uuids], dict(target.storage_options))


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
