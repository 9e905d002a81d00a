"""A table's health evaluated again only when the table changed: one listing of its
``_transactions/`` per evaluation of a table read before, and the rest from what this engine
worker read before.

``lance.system.table_health``, ``maintain_warehouse`` (its evaluation, dry run or not) and the
maintenance service's rounds evaluate every table of the warehouse each time; most tables did not
change in between. What a table's health is made of is decided by its version (the manifest:
fragments, deletions, indices, config and so the policy's table properties), by the versions
it keeps (how many, and which are older than ``older_than``: time) and by the policy. The first
evaluation of a table lists its ``_versions/`` (to count the versions: version_ages.py) and its
``_transactions/`` at once (one round trip). Every commit Lance 14.0.2 makes writes a
transaction file there, named by its read version and a UUID it drew, and a cleanup removes
those of the versions it removes (checked: append, delete, compaction, index, config, update,
restore; cleanup with and without a tag), so for a table whose every listed version had its
transaction file the next evaluation's probe is that listing alone (one request); ``_versions/``
is listed again only when it changed. A table some of whose versions have none (written by
another writer) is probed with both listings, as at its first evaluation. Then:

* when the listing is the one this worker evaluated last for the table (the same versions,
  so the same newest version and nothing cleaned up since), the policy is resolved again from
  the table's config as read then (with the call's arguments and the catalog's settings of
  now), and, for a policy seen then, the health is assembled from what that version decided
  (:class:`~.health.VersionHealth`) with the time-dependent parts counted again at this
  evaluation's ``now``: which versions are older than ``older_than`` (from the commit times read
  then; the cutoff moves on) and ``hours_since_compaction``. Nothing else is read: the row is
  what a fresh evaluation gives (tests/test_health_cache.py checks it row for row);
* otherwise (a commit, a cleanup, a policy not seen, a commit time not read before) the table is
  opened and evaluated in full, and what it decided is kept for the next time.

What ``lance.system.table_health`` kept (with the last compaction) also answers
``maintain_warehouse``'s evaluation (without it) under the same policy; not the other way round.

The probe of a table read before costs one request (two at once for a table first seen) on an
object store where a full evaluation
of a small table costs about five more (Lance's open: a LIST and a GET; a HEAD and a GET of the
manifest that decides cleanup), the CPU of reading its fragments and indices, and for
``lance.system.table_health`` the last compaction: one ranged read of each version's manifest
head, newest first, a few at once, until a compaction (compaction/history.py, health.LOOK_BACK).

A version's manifest is named by its number only (pylance's listing gives names, not the
objects' tags or times); a table dropped and created again at the same location is told apart by
its transaction files' UUIDs. Not seen by the one-request probe: a cleanup that removed a
version's manifest but failed to remove its transaction file (Lance counts ``failed_deletes``);
the table's next commit or cleanup is.

Kept per engine worker (each statement runs in a worker of the driver's pool): a warehouse-wide
statement goes to the most recently used free worker, so one user's statements one after the
other find the same worker's cache; statements at the same time run in different workers,
each with a cache of its own (a second worker's first evaluation reads every table). Bounded:
at most :data:`TABLES` tables, the least recently evaluated forgotten first.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Hashable, Mapping, Sequence

import lance

from ..compaction.fragment_facts import FragmentFacts
from ..compaction.fragments import index_state
from .health import METADATA_THREADS, Health, VersionHealth, assemble, table_health, version_health
from .policy import Policy
from .version_ages import listed_versions, reclaimable_by, table_key, version_facts

# About 3.5 KB a table (measured: a small table's health under its policy, with and without the
# last compaction, and its commit times): 16,384 tables are some 56 MB at most, a warehouse of
# ten thousand tables kept whole.
TABLES = 16_384
# Tables evaluated at once by a warehouse-wide statement: most of them only listed (a request
# that waits on the store, the GIL released), so many more than are read in full at once
# (METADATA_THREADS: a full read holds the table's manifest and fragments).
EVALUATION_THREADS = 64


@dataclass
class _Entry:
    """What one full evaluation of a table read: its listing, version, config, the commit
    times known of its listed versions, and each policy's :class:`VersionHealth`."""

    listed: tuple[int, ...]
    config: Mapping[str, str]
    times: dict[int, datetime]
    decided: dict[tuple, VersionHealth] = field(default_factory=dict)
    resolved: dict[Hashable, list[Policy]] = field(default_factory=dict)  # by the caller's policy_key

    @property
    def version(self) -> int:
        return self.listed[-1]


@dataclass
class Evaluation:
    """A table's health under each policy asked for. ``ds``: the open the evaluation read the
    table through (None when it was served from what was read before: the caller opens the
    table itself if it needs it); ``config``: the table's config it was evaluated with."""

    healths: list[Health]
    policies: list[Policy]
    config: Mapping[str, str]
    ds: lance.LanceDataset | None
    served: bool


def _policy_key(policy: Policy, history: bool) -> tuple:
    """What of a policy a table's health depends on: its values, where they came from (the
    reasons name them) and the table's name (the messages do)."""
    return (policy.table, history, repr(sorted(policy.values.items())), repr(sorted(policy.origins.items())))


class HealthCache:
    """What this worker's full evaluations of each table decided (see the module's doc)."""

    def __init__(self, tables: int = TABLES) -> None:
        self._lock = threading.Lock()
        self._tables = tables
        self._by_table: OrderedDict[str, _Entry] = OrderedDict()
        self._reads = threading.BoundedSemaphore(METADATA_THREADS)  # full reads at once
        # each kept table's _transactions/ listing when it was read, as a digest of its names:
        # they carry a UUID a commit drew, so a table removed and made again at the same
        # location with the same version numbers (which _versions/ alone cannot tell apart) is
        # read again. A digest, not the names: a table keeping many versions (a stream's every
        # few seconds for a week) has that many names, about 100 bytes each
        # (digest, how many names): the count says whether every listed version had its file
        self._marks: dict[str, tuple[str, int]] = {}
        self.served = 0  # evaluations answered from what was read before
        self.read = 0  # evaluations that opened the table

    def _get(self, key: str) -> _Entry | None:
        with self._lock:
            entry = self._by_table.get(key)
            if entry is not None:
                self._by_table.move_to_end(key)
            return entry

    def _put(self, key: str, entry: _Entry) -> None:
        with self._lock:
            self._by_table.pop(key, None)
            self._by_table[key] = entry
            while len(self._by_table) > self._tables:
                gone, _ = self._by_table.popitem(last=False)
                self._marks.pop(gone, None)

    def forget(self) -> None:
        """Forget every table (tests; a worker's caches are otherwise bounded, not cleared)."""
        with self._lock:
            self._by_table.clear()
            self._marks.clear()

    def figures(self) -> str:
        """What is kept and how often it answered, for the engine's log."""
        with self._lock:
            kept = len(self._by_table)
        return (f"health of {kept} tables kept (at most {self._tables}); {self.served} evaluations "
                f"served from it, {self.read} read the table")

    def _count(self, served: bool) -> None:
        with self._lock:
            if served:
                self.served += 1
            else:
                self.read += 1

    def _served(self, entry: _Entry, policies: Sequence[Policy], history: bool,
                now: datetime) -> list[Health] | None:
        """The healths from ``entry`` alone, or None when it does not hold all they need."""
        listed = list(entry.listed)
        out = []
        for policy in policies:
            v = entry.decided.get(_policy_key(policy, history))
            if v is None and not history:  # lance.system.table_health's, without the last compaction
                w = entry.decided.get(_policy_key(policy, True))
                v = None if w is None else replace(
                    w, when=None, parts={**w.parts, "last_compacted_version": None},
                    reasons={k: r for k, r in w.reasons.items() if k != "last_compaction"})
            if v is None:
                return None
            try:
                old = reclaimable_by(listed, entry.version, v.cutoff(now), v.retain, entry.times.__getitem__)
            except KeyError:  # the cutoff moved to a version whose time was not read
                return None
            out.append(assemble(v, len(listed), old, now))
        return out

    def _serve(self, entry: _Entry, policies: Callable[[Mapping[str, str]], Sequence[Policy]], history: bool,
               now: datetime, policy_key: Hashable | None) -> Evaluation | None:
        """The evaluation from ``entry`` alone (the table did not change), or None when it does
        not hold all the policies need."""
        chosen = entry.resolved.get(policy_key) if policy_key is not None else None
        if chosen is None:
            chosen = list(policies(entry.config))
            if policy_key is not None:
                entry.resolved[policy_key] = chosen
        healths = self._served(entry, chosen, history, now)
        if healths is None:
            return None
        self._count(True)
        return Evaluation(healths, chosen, entry.config, None, True)

    def evaluate(self, uri: str, storage_options: Mapping[str, str] | None,
                 open_table: Callable[[], lance.LanceDataset],
                 policies: Callable[[Mapping[str, str]], Sequence[Policy]],
                 history: bool = True, now: datetime | None = None,
                 policy_key: Hashable | None = None) -> Evaluation:
        """The health of the table at ``uri`` under each of ``policies(config)`` (resolved from
        the table's config), at ``now``: from what was read before when the table did not change
        (one listing), else read with ``open_table()`` (health.table_health's rules and reads;
        at most METADATA_THREADS tables of this worker at once). ``policy_key``: everything
        ``policies`` depends on but the config (the call's arguments, the catalog's settings,
        the operator's version floor), when the caller can say it: the policies resolved for a
        kept table are then kept too (a policy resolved again only costs CPU)."""
        now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
        options = storage_options if storage_options is not None else {}
        key = table_key(uri, options)
        entry = self._get(key)
        kept = self._marks.get(key)
        if entry is not None and kept is not None and kept[1] >= len(entry.listed):
            # a kept table whose every listed version had its transaction file: the probe is
            # one LIST of _transactions/ (a commit adds a file, a cleanup removes those of the
            # versions it removes, a table made again has other UUIDs); _versions/ is listed
            # only when that changed
            marks = _transaction_marks(uri, options)
            if marks is not None and marks == kept:
                healths = self._serve(entry, policies, history, now, policy_key)
                if healths is not None:
                    return healths
            listed = listed_versions(uri, options)
        else:
            # the first evaluation: both listings at once (one round trip)
            marking = _probes().submit(_transaction_marks, uri, options)
            listed = listed_versions(uri, options)
            marks = marking.result()
            if (entry is not None and listed and entry.listed == tuple(listed) and marks is not None
                    and kept is not None and kept[0] == marks[0]):
                healths = self._serve(entry, policies, history, now, policy_key)
                if healths is not None:
                    return healths
            entry = entry if listed else None
        self._count(False)
        with self._reads:
            out = self._read(uri, key, options, listed, entry, open_table, policies, history, now, policy_key)
        with self._lock:
            # The marks are kept only beside the entry this read kept for this very listing: a
            # read that kept nothing (a commit between the listing and the open) leaves the
            # earlier entry, which these newer marks must never vouch for (the one-listing
            # probe would then serve the table as it was before that commit)
            stored = self._by_table.get(key)
            if marks is None or stored is None or stored is entry or not listed or stored.listed != tuple(listed):
                self._marks.pop(key, None)
            else:
                self._marks[key] = marks
        return out

    def _read(self, uri: str, key: str, options: Mapping[str, str], listed: list[int] | None,
              entry: _Entry | None, open_table: Callable[[], lance.LanceDataset],
              policies: Callable[[Mapping[str, str]], Sequence[Policy]], history: bool,
              now: datetime, policy_key: Hashable | None) -> Evaluation:
        """A full evaluation, kept when the table is still at its listed version."""
        ds = open_table()
        config = ds.config() or {}
        chosen = list(policies(config))
        if not listed or ds.version != listed[-1]:
            # a commit between the listing and the open (or no listing): evaluated as before, not kept
            healths = [table_health(ds, p, now, history, options) for p in chosen]
            return Evaluation(healths, chosen, config, ds, False)
        facts = FragmentFacts.of(ds)  # read once for every policy
        indices = index_state(ds, facts)
        times: dict[int, datetime] = {}
        keep = _Entry(tuple(listed), config, times)
        healths = []
        for policy in chosen:
            v = version_health(ds, policy, history, options, facts, indices, listed=listed)
            count, old = version_facts(ds, options, v.cutoff(now), v.retain, listed, times)
            if not times:  # not from this listing (a concurrent cleanup): nothing to keep
                keep = None
            elif keep is not None:
                keep.decided[_policy_key(policy, history)] = v
            healths.append(assemble(v, count, old, now))
        if keep is not None:
            previous = entry if entry is not None and entry.listed == keep.listed else None
            if previous is not None:  # the same table state: keep the other policies' too
                keep.decided = {**previous.decided, **keep.decided}
                keep.times = {**previous.times, **keep.times}
                keep.resolved = dict(previous.resolved)
            if policy_key is not None:
                keep.resolved[policy_key] = chosen
            self._put(key, keep)
        return Evaluation(healths, chosen, config, ds, False)


HEALTH = HealthCache()  # this engine worker's


def own_policy_key(table: str, catalog: str, settings: Mapping[str, str]) -> tuple:
    """``policy_key`` of a table's own policy (no call arguments: table_health's, a score's)."""
    from ..runtime import driver_conf
    return ("own", table, catalog, repr(sorted(settings.items())), driver_conf.version_floor())


def call_policy_key(table: str, catalog: str, settings: Mapping[str, str], call_args: Mapping[str, Any]) -> tuple:
    """``policy_key`` of maintain_warehouse's policies (the call's, and the table's own)."""
    return ("call", repr(sorted(call_args.items())), *own_policy_key(table, catalog, settings)[1:])


_PROBES: ThreadPoolExecutor | None = None
_PROBES_LOCK = threading.Lock()


def _probes() -> ThreadPoolExecutor:
    """Threads for the probe's second listing, as many as tables are evaluated at once (each
    waits on the store with the GIL released and submits nothing more)."""
    global _PROBES
    with _PROBES_LOCK:
        if _PROBES is None:
            _PROBES = ThreadPoolExecutor(EVALUATION_THREADS, thread_name_prefix="lance-compact-probe")
        return _PROBES


def _transaction_marks(uri: str, storage_options: Mapping[str, str]) -> tuple[str, int] | None:
    """A digest of the names in the table's ``_transactions/`` (each a commit's read version
    and a UUID it drew), sorted, and how many there are; None when they cannot be listed (the
    table is then always read)."""
    import hashlib

    from ..runtime.tables import list_folder
    try:
        names = sorted(list_folder(uri, storage_options, "_transactions"))
    except Exception:  # noqa: BLE001 - no probe: read the table in full
        return None
    return hashlib.sha256("\n".join(names).encode()).hexdigest(), len(names)
