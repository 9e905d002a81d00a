"""The layout report: what a user looks at to decide whether to compact.

``describe_layout`` returns one row (parameters.json's ``layout_columns``); with
``histogram => true`` the fragment-size histogram as text instead, one row per line (column
``histogram``), which spark-sql prints as it is. ``picture => 'layout.png'`` (or .svg)
also draws it into a file on the driver, inside the folder the operator allowed
(``spark.lance.compact.picture.dir``); ``compare_version => N`` puts version N beside the
current one.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any, Mapping

from ..runtime import driver_conf
from ..errors import CompactionError
from ..compaction.fragment_facts import FragmentFacts
from ..maintenance.health import table_health
from .histogram import FragmentHistogram
from .histogram_picture import PlotUnavailable, load_matplotlib, picture_format
from ..compaction.history import committed_at, last_compaction
from ..compaction.fragments import index_state
from ..compaction import rules
from ..options import convert_value, specs_of
from ..maintenance.policy import resolve_policy
from ..compaction.request import CompactionRequest
from ..compaction.clustering.state import clustering_columns, measure_table
from ..runtime.envelope import Envelope, Result, Target


def _fragments(ds, facts: FragmentFacts | None = None) -> tuple[list[int], list[int], list[int], list[int], int]:
    """Ids, live rows, deleted rows and physical rows of each fragment; bytes of all (Lance's
    summary of the version)."""
    facts = facts if facts is not None else FragmentFacts.of(ds)
    return (facts.ids.tolist(), facts.live.tolist(), facts.deleted.tolist(), facts.physical.tolist(),
            facts.bytes or 0)


def picture_path(value: str, table: str) -> str:
    """The absolute local path a ``picture`` argument names, checked before any work: inside
    the folder the operator allowed (``spark.lance.compact.picture.dir``), no way out of it."""
    def bad(why: str) -> CompactionError:
        return CompactionError(f"table {table}: describe_layout parameter picture {why}, got {value!r}")

    folder = driver_conf.picture_dir()
    if folder is None:
        raise CompactionError(
            f"table {table}: describe_layout parameter picture is off: the engine writes pictures only "
            f"into a folder the operator allows; set {driver_conf.PICTURE_DIR}=/some/folder in the "
            "driver's Spark configuration (spark-submit --conf, a properties file or the session "
            "builder; lance-spark-sql and configure_spark_with_lance_compact set it to the current "
            "folder), or leave picture out and use histogram => true")
    path = value.strip()
    if path.lower().startswith("file://"):
        path = path[len("file://"):]
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        raise bad("is a local file path on the driver (the engine writes it), not a URI")
    if not path:
        raise bad("must name a file")
    if picture_format(path) is None:
        raise bad("must name a .png or .svg file")
    root = os.path.realpath(folder)
    # Relative paths are taken inside the folder; symlinks and '..' are resolved before the check.
    path = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, path]) != root:
        raise bad(f"must name a file inside {root} (the folder {driver_conf.PICTURE_DIR} allows)")
    if os.path.isdir(path):
        raise bad("names a directory; name a .png or .svg file")
    if not os.path.isdir(os.path.dirname(path)):
        raise bad(f"names a file in {os.path.dirname(path)}, which is not a directory on the driver")
    return path


def _layout_args(given: Mapping[str, Any], table: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """describe_layout's own parameters (histogram, picture, compare_version) taken out of
    the request's params and checked; and the rest, which are compaction options."""
    specs = specs_of("layout_parameters")
    params = dict(given)
    args = {}
    for name, spec in specs.items():
        value = params.pop(name, None)
        if value is not None:
            args[name] = convert_value(spec, value, table)
    if "picture" in args:
        args["picture"] = picture_path(args["picture"], table)
        try:
            load_matplotlib()
        except PlotUnavailable as e:
            raise CompactionError(f"table {table}: describe_layout parameter picture: {e}") from None
    if "compare_version" in args and not (args.get("histogram") or "picture" in args):
        raise CompactionError(f"table {table}: describe_layout parameter compare_version draws an "
                              "earlier version in the histogram: give histogram => true or picture => ...")
    return args, params


def layout_result(request: Envelope) -> Result:
    """The engine's answer to describe_layout: the layout row, or the histogram's lines."""
    t = request.require_target()
    table = t.table
    args, options = _layout_args(request.params, table)
    compaction = CompactionRequest.of(replace(request, params=options))
    row, ds, live_rows, deleted_rows, target = _layout(compaction, t)
    if not args.get("histogram") and "picture" not in args:
        return Result.of("layout_columns", [row])
    series, versions = [], []
    if "compare_version" in args:
        old = t.open(version=args["compare_version"])
        _, old_live, old_deleted, _, _ = _fragments(old)
        series.append((f"version {old.version}", old_live, old_deleted))
        versions.append(old.version)
    series.append((f"version {ds.version}", live_rows, deleted_rows))
    versions.append(ds.version)
    hist = FragmentHistogram(series, target=target, title=table, versions=versions)
    lines = hist.text_lines()
    if "picture" in args:
        try:
            hist.save(args["picture"])
        except OSError as e:
            raise CompactionError(f"table {table}: describe_layout parameter picture: could not write "
                                  f"{args['picture']}: {e.strerror or e}") from None
        lines.append(f"picture: {args['picture']}")
    if not args.get("histogram"):
        return Result.of("layout_columns", [row])
    return Result.of("histogram_columns", [{"histogram": line} for line in lines])


def _layout(request: CompactionRequest, t: Target) -> tuple[dict[str, Any], Any, list[int], list[int], int]:
    """The layout row (by column name), with the dataset, live and deleted rows per fragment
    and the target.

    The request's target_rows_per_fragment and materialize_deletions_threshold, if given,
    set what counts as small and as over the threshold; else the table's, else Lance's.
    """
    ds = t.open()
    config = ds.config() or {}
    thresholds = rules.Thresholds.of_compaction(config, request.options)
    target, threshold = thresholds.target, thresholds.threshold

    facts = FragmentFacts.of(ds)  # one pass over the fragments, shared by every figure below
    ids, live_rows, deleted_rows, physical, size = _fragments(ds, facts)

    state = index_state(ds, facts)
    indices = [(name, e["type"], e["fields"], e["unindexed"]) for name, e in sorted(state.items())]

    last = last_compaction(ds)
    # The score and due steps of lance.system.table_health: the table's policy, not the
    # target or threshold given to describe_layout.
    # (history=False: the last compaction is above; versions from a listing, not every manifest)
    health = table_health(ds, resolve_policy(None, config, t.maintain_settings, t.table, t.catalog),
                          history=False, storage_options=t.storage_options, facts=facts, indices=state)
    how = None  # also when the counts cannot be known (see history.rewrite_counts)
    if last and last.fragments_removed is not None:
        how = f"{last.fragments_removed} fragments -> {last.fragments_added}"
    row = {
        "table": request.table,
        "version": ds.version,
        "fragments": len(ids),
        "rows": sum(live_rows),
        "deleted_rows": sum(deleted_rows),
        "bytes": size,
        "target_rows_per_fragment": target,
        "small_fragments": int(facts.small(target).sum()),
        "fragments_with_deletions": int((facts.deleted > 0).sum()),
        "fragments_over_deletion_threshold": int(facts.over_threshold(threshold).sum()),
        "max_deleted_fraction": float(facts.deleted_fractions().max()) if len(facts) else 0.0,
        "fragment_rows": live_rows,
        "indices": indices,
        "last_compacted_version": last.version if last else None,
        "last_compacted_at": committed_at(ds, last.version) if last else None,
        "last_compaction": how,
        "fragment_deleted_rows": deleted_rows,
        "health_score": health.score,
        "due": list(health.due),
        **clustering_columns(ds, measure_table(ds, facts)),  # compaction/clustering/state.py
    }
    return row, ds, live_rows, deleted_rows, target
