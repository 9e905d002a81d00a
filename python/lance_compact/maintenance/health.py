"""A table's health, from its metadata only: the manifest (fragments, their row and deletion
counts), the index metadata (which fragments each index covers), the version list and the
newest compaction transaction. No data file is read.

The steps due are decided as ``CALL lance.maintain`` decides them, with the policy's
thresholds (policy.py), so ``maintain`` and ``maintain_warehouse`` agree:

* ``compact``: at least ``min_small_fragments`` fragments (and more than one) hold fewer live
  rows than ``target_rows_per_fragment``, or a fragment's deleted fraction exceeds the table's
  ``materialize_deletions_threshold`` (Lance's ``lance.compaction.*`` setting, else 0.1); for a
  table kept clustered (CLUSTER BY), also when 10% of its rows are not yet clustered, or its
  clustering depth is above ``max_clustering_depth`` (default 4) while a fragment is not yet
  clustered;
* ``optimize_indices``: an index leaves at least ``min_unindexed_fragments`` fragments uncovered;
* ``cleanup``: a version other than the current one is older than ``older_than`` and is not
  among the newest ``retain_versions`` (unset: only the current version is kept).

The score, 0 (everything due, at its worst) to 100 (nothing due), is Amoro-like: 100 minus
weighted penalties, each a need in [0, 1) times its weight, counted only for a step that is due.
Every need grows strictly with how far its part is from healthy, so tables grade, and "worst
first" is an order, not a tie broken by chance:

==================  ======  ==============================================================
part                weight  need
==================  ======  ==============================================================
small fragments       35    log2(fragments / ideal) / 10, at most 1; ideal = ceil(rows /
                            target) (1024 times the ideal count is all of it)
  or clustering decay       for a clustered table, log2(depth) / 10 when that is more
                            (depth 1: fresh; 11: a key lookup reads 11 fragments, 12
                            points); the two share the 35 points
deleted rows          25    1.25 * r / (r + 0.25), r = deleted_row_ratio (10%: 0.36,
                            50%: 0.83, all: 1)
index lag             25    max over indices of unindexed fragments / fragments
old versions          15    reclaimable_versions / (reclaimable_versions + 10)
==================  ======  ==============================================================

Small fragments cost every scan per fragment opened, and clustering decay costs every key
lookup the same way (depth is the fragments a lookup reads), so their part measures how many times
more fragments the table has than it needs, on a log scale (16, 24, 40, 60, 90 and 120 small
fragments of one small table score 86, 84, 81, 79, 77 and 76 on this part alone). Deleted
rows are read and thrown away by every scan. Both are cured by compaction, so they count when
``compact`` is due. An index's uncovered fragments are scanned by every indexed query: next.
Old versions cost storage only and saturate (10 of them are half the part). A due step always
costs at least one point, so only a table with nothing due scores 100. The score orders tables
by need; ``due`` says what to do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

import lance

from .version_cleanup import parse_older_than
from .version_ages import version_facts
from ..compaction.fragment_facts import FragmentFacts
from ..compaction.history import commit_time, last_compaction_version, newest_rewrite
from ..compaction.clustering.state import clustering_columns, measure_table
from ..compaction.fragments import index_state
from ..compaction import rules
from .policy import Policy

STEPS = ("compact", "optimize_indices", "cleanup")
# Tables whose metadata is read at once (system tables, maintain_warehouse's evaluation):
# pylance's I/O releases the GIL, so threads overlap object-store round trips; bounded, so a
# large warehouse does not open every table at once.
METADATA_THREADS = 16
WEIGHTS = {"small_fragments": 35, "deleted_rows": 25, "index_lag": 25, "old_versions": 15}
# Versions the last compaction is looked for among, newest first (one ranged read of each
# manifest file's head, a few at once: history.newest_rewrite). A table that kept more versions
# and has no compaction among its newest LOOK_BACK shows the last compaction as not known
# (reasons['last_compaction'] says so), not as none: a table never cleaned up would otherwise
# cost a read per version it ever had.
LOOK_BACK = 100


@dataclass(frozen=True)
class Health:
    """``score`` 0..100, ``parts`` (the facts it is made of), ``due`` (steps, in order) and
    ``reasons`` (step -> why it is or is not due)."""

    score: int
    parts: Mapping[str, Any] = field(default_factory=dict)
    due: list[str] = field(default_factory=list)
    reasons: Mapping[str, str] = field(default_factory=dict)


compaction_due = rules.compaction_due  # maintain's rule, one place: compaction/rules.py


def reclaimable(versions: list[dict[str, Any]], older_than: str, retain: int | None,
                now: datetime, table: str) -> list[int]:
    """Versions cleanup would remove: not the current one nor among the newest ``retain``,
    committed before ``now - older_than``."""
    return rules.reclaimable(versions, now - parse_older_than(older_than, table), retain)


def needs(parts: Mapping[str, Any]) -> dict[str, float]:
    """Each part's need in [0, 1] (the module's table): 0 healthy, growing strictly with how far
    the part is from healthy."""
    fragments, rows = parts["fragments"], parts["rows"]
    ideal = max(1, math.ceil(rows / max(1, parts["target_rows_per_fragment"])))
    r = parts["deleted_row_ratio"]
    n = parts["reclaimable_versions"]
    depth = parts.get("clustering_depth")
    return {
        "small_fragments": min(1.0, math.log2(fragments / ideal) / 10) if fragments > ideal else 0.0,
        "clustering": min(1.0, math.log2(depth) / 10) if depth is not None and depth > 1 else 0.0,
        "deleted_rows": 1.25 * r / (r + 0.25),
        "index_lag": min(1.0, parts["unindexed_fragments"] / fragments) if fragments else 0.0,
        "old_versions": n / (n + 10),
    }


def _score(parts: Mapping[str, Any], due: list[str]) -> int:
    need = needs(parts)
    penalty = 0.0
    if "compact" in due:
        penalty += max(1.0, WEIGHTS["small_fragments"] * max(need["small_fragments"], need["clustering"])
                       + WEIGHTS["deleted_rows"] * need["deleted_rows"])
    if "optimize_indices" in due:
        penalty += max(1.0, WEIGHTS["index_lag"] * need["index_lag"])
    if "cleanup" in due:
        penalty += max(1.0, WEIGHTS["old_versions"] * need["old_versions"])
    return max(0, min(100, round(100 - penalty)))


@dataclass(frozen=True)
class VersionHealth:
    """What a table's version alone decides of its health under a policy: every part but the
    versions and how old they are (a later evaluation of the same version and versions list
    finishes it with :func:`assemble`, health_cache.py). ``when``: the last compaction's commit
    time (``hours_since_compaction`` is counted from it at each evaluation)."""

    parts: Mapping[str, Any]
    compact: bool
    lagging: bool
    reasons: Mapping[str, str]
    when: datetime | None
    older_than: str
    retain: int | None
    table: str

    def cutoff(self, now: datetime) -> datetime:
        """Versions committed before this are old enough for cleanup: ``now`` less a duration,
        or the moment ``older_than`` names itself (its age is measured against the clock when it
        is parsed, not against ``now``: a few milliseconds later, enough to move the cutoff past
        a version committed in between)."""
        age = parse_older_than(self.older_than, self.table)  # checked as every older_than is
        try:
            moment = datetime.fromisoformat(self.older_than.strip())
        except ValueError:
            return now - age
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def version_health(ds: lance.LanceDataset, policy: Policy, history: bool = True,
                   storage_options: Mapping[str, str] | None = None,
                   facts: FragmentFacts | None = None,
                   indices: dict[str, dict[str, Any]] | None = None,
                   versions: list[dict[str, Any]] | None = None,
                   listed: list[int] | None = None) -> VersionHealth:
    """The part of :func:`table_health` that ``ds``'s version decides (its arguments are
    table_health's; ``versions``: ``ds.versions()`` when the caller read them, where the last
    compaction is looked up without ``storage_options``; ``listed``: the table's
    ``_versions/`` listing when the caller made it: the last compaction is looked for among the
    listed versions only, nothing read for one cleanup removed)."""
    table = policy.table
    config = ds.config() or {}
    thresholds = rules.Thresholds.of_maintenance(config, policy)
    target = thresholds.target
    min_small = int(policy.get("min_small_fragments"))
    facts = facts if facts is not None else FragmentFacts.of(ds)  # one pass, as columns
    clustering = measure_table(ds, facts)  # the table's own clustering (CLUSTER BY), if it has one
    need = rules.compaction_need(facts, thresholds, min_small, clustering.unclustered_share,
                                 clustering.clustered_ids, clustering.depth, clustering.unclustered_fragments,
                                 policy.get("max_clustering_depth"))
    small, heavy = need.small, need.heavy
    live, deleted = facts.rows, facts.deleted_rows

    state = indices if indices is not None else index_state(ds, facts)
    min_unindexed = int(policy.get("min_unindexed_fragments"))
    lagging = rules.lagging_indices(state, min_unindexed)

    when = last = None
    unknown = None
    if history and storage_options is None:
        versions = versions if versions is not None else ds.versions()
        # its version only (its counts would open two more manifests), from the versions read
        last = last_compaction_version(ds, versions)
        if last is not None:
            when = next((v["timestamp"] for v in versions if v["version"] == last), None)
    elif history:
        # newest first, each version's operation from its manifest file's head, a few at once,
        # at most LOOK_BACK versions (history.newest_rewrite)
        last, complete = newest_rewrite(ds, listed, LOOK_BACK)
        if last is not None:
            when = commit_time(ds, last)
        elif not complete:
            kept = "" if listed is None else f" of the {len(listed)} the table keeps"
            unknown = (f"not known: no compaction among the newest {LOOK_BACK} versions{kept}; older "
                       "ones were not read (health reads at most that many; CALL lance.cleanup removes old versions)")

    parts: dict[str, Any] = {
        "version": ds.version,
        "fragments": len(facts),
        "rows": live,
        "bytes": facts.bytes,
        "target_rows_per_fragment": target,
        "small_fragments": small,
        "small_fragment_ratio": small / len(facts) if len(facts) else 0.0,
        "deleted_rows": deleted,
        "deleted_row_ratio": deleted / (live + deleted) if live + deleted else 0.0,
        "fragments_over_deletion_threshold": heavy,
        "unindexed_fragments": max((e["unindexed"] for e in state.values()), default=0),
        "unindexed_rows": max((e["unindexed_rows"] for e in state.values()), default=0),
        "index_segments": max((e["segments"] for e in state.values()), default=0),
        "indices": {n: {"type": e["type"], "unindexed_fragments": e["unindexed"],
                        "unindexed_rows": e["unindexed_rows"], "segments": e["segments"]}
                    for n, e in sorted(state.items())},
        "versions": None,
        "reclaimable_versions": None,
        "reclaimable_bytes": None,
        "hours_since_compaction": None,
        "last_compacted_version": last,
        **clustering_columns(ds, clustering),  # compaction/clustering/state.py
    }
    reasons = {"compact": need.reason,
               "optimize_indices": rules.optimize_indices_reason(state, lagging, min_unindexed)}
    if unknown is not None:
        reasons["last_compaction"] = unknown
    return VersionHealth(parts=parts, compact=need.due, lagging=bool(lagging), reasons=reasons, when=when,
                         older_than=str(policy.get("older_than")), retain=policy.get("retain_versions"),
                         table=table)


def assemble(v: VersionHealth, versions: int, old: list[int], now: datetime) -> Health:
    """The health from what the version decides (``v``), the table's number of ``versions``
    and those cleanup would remove (``old``) at ``now``."""
    hours = None
    if v.when is not None:
        hours = max(0.0, (now - v.when.astimezone(timezone.utc)).total_seconds() / 3600)
    parts = {**v.parts, "versions": versions, "reclaimable_versions": len(old), "hours_since_compaction": hours}
    due = [s for s, d in zip(STEPS, (v.compact, v.lagging, bool(old))) if d]
    reasons = {**v.reasons, "cleanup": rules.cleanup_reason(old, v.older_than, v.retain)}
    return Health(score=_score(parts, due), parts=parts, due=due, reasons=reasons)


def table_health(ds: lance.LanceDataset, policy: Policy, now: datetime | None = None,
                 history: bool = True, storage_options: Mapping[str, str] | None = None,
                 facts: FragmentFacts | None = None,
                 indices: dict[str, dict[str, Any]] | None = None) -> Health:
    """The health of ``ds`` under ``policy`` (see the module's doc for the rules and the
    score). Pure: reads metadata only, writes nothing. ``parts['reclaimable_bytes']`` is
    always None: the bytes only old versions hold are not in the current manifest, and
    finding them means reading every old manifest. ``history=False``: the last compaction
    is not looked up (``last_compacted_version`` and ``hours_since_compaction`` are None):
    neither the score nor what is due depends on it, and finding it reads transactions
    (maintain_warehouse's evaluation skips it). Given the table's ``storage_options``, the
    versions are counted from one listing of ``_versions/`` and only the manifests that decide
    what cleanup would remove are read (version_ages.py), and the last compaction is found
    newest first (history.py), not from every manifest (``versions()`` decodes each in full:
    seconds for a few versions of 300,000 fragments). ``facts``: the table's fragments when the caller read them already
    (fragment_facts.py), and ``indices`` their index coverage (fragments.index_state).
    A later evaluation of an unchanged table is served by health_cache.py."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    versions = ds.versions() if storage_options is None else None  # every manifest, decoded in full
    v = version_health(ds, policy, history, storage_options, facts, indices, versions)
    if versions is not None:
        count, old = len(versions), rules.reclaimable(versions, v.cutoff(now), v.retain)
    else:
        count, old = version_facts(ds, storage_options, v.cutoff(now), v.retain)
    return assemble(v, count, old, now)
