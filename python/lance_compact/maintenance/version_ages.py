"""A table's versions and which of them cleanup would remove, from one listing of its
``_versions/`` folder and the commit times of as few versions as the answer needs.

``LanceDataset.versions()`` reads every manifest (on an object store, a round trip or two per
version: 27 requests for a table of 26 versions), only for their times. Health needs the
number of versions and which of them are older than a cutoff, beyond the newest ``retain``.
Commit times rise with versions (each commit follows the one it builds on), so the versions
older than a cutoff are a prefix of the list, found by bisection:

* the listing gives the version numbers (Lance's manifest names, both naming schemes; a
  detached version is not one of them);
* the current version's time is in the open manifest already: when it is older than the
  cutoff, so is every earlier version, and nothing more is read;
* else the oldest candidate's manifest is read (none reclaimable if it is younger), then the
  newest's, then a bisection between them: at most ``2 + log2(versions)`` manifests, usually one.

The answer is what ``compaction/rules.reclaimable`` gives on ``versions()`` whenever commit
times rise with versions (writers whose clocks disagree by more than the gap between their
commits could make the two differ by a version; cleanup itself, Lance's, reads every
manifest and decides with its own times). When the folder cannot be listed or its names do
not include the open version (another layout), ``versions()`` answers, as before.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Mapping

import lance
from lance.file import LanceFileSession

from ..compaction import rules
from ..compaction.history import version_gone

# Lance's manifest names: "<version>.manifest" (V1), or 20 digits of u64::MAX - version (V2).
_MANIFEST = re.compile(r"^(\d+)\.manifest$")
_V2_DIGITS = 20
_U64_MAX = (1 << 64) - 1
_DETACHED = 1 << 63  # Lance marks a detached version with the top bit


def version_number(name: str) -> int | None:
    """The version a ``_versions/`` entry's file name holds, or None (not a manifest of an
    attached version: the latest-version hint, a detached version, a temporary file)."""
    m = _MANIFEST.match(name.rsplit("/", 1)[-1])
    if m is None:
        return None
    digits = m.group(1)
    version = _U64_MAX - int(digits) if len(digits) == _V2_DIGITS else int(digits)
    return version if 0 < version < _DETACHED else None


def listed_versions(uri: str, storage_options: Mapping[str, str] | None) -> list[int] | None:
    """The table's versions, sorted, from one listing of ``_versions/``; None when it cannot be
    listed (the caller reads ``versions()`` instead)."""
    try:
        listing = LanceFileSession(uri.rstrip("/"), dict(storage_options or {}) or None) \
            .list_with_delimiter("_versions")
    except Exception:  # an unusual layout or store: versions() answers
        return None
    return sorted(v for v in map(version_number, listing.objects) if v is not None)


def _utc(when: datetime) -> datetime:
    return when.astimezone(timezone.utc)


class _Times:
    """Commit times of a table's versions, each manifest read at most once."""

    def __init__(self, ds: lance.LanceDataset) -> None:
        self.ds = ds
        self.known = {ds.version: _utc(ds.get_version()["timestamp"])}  # the open manifest: no read
        self.reads = 0

    def __call__(self, version: int) -> datetime:
        if version not in self.known:
            self.reads += 1
            self.known[version] = _utc(self.ds.checkout_version(version).get_version()["timestamp"])
        return self.known[version]


def reclaimable(ds: lance.LanceDataset, versions: list[int], cutoff: datetime,
                retain: int | None) -> tuple[list[int], int]:
    """The versions cleanup would remove (not the newest ``retain``, at least the newest one,
    committed before ``cutoff``) among ``versions`` (sorted, the listing's), and how many
    manifests were read to know it."""
    keep = max(1, retain or 1)
    candidates = versions[:-keep]
    if not candidates:
        return [], 0
    time = _Times(ds)
    if candidates[-1] <= ds.version and time(ds.version) < cutoff:
        return candidates, 0
    if time(candidates[0]) >= cutoff:
        return [], time.reads
    if time(candidates[-1]) < cutoff:
        return candidates, time.reads
    older, younger = 0, len(candidates) - 1  # candidates[older] is older than the cutoff, [younger] not
    while younger - older > 1:
        mid = (older + younger) // 2
        if time(candidates[mid]) < cutoff:
            older = mid
        else:
            younger = mid
    return candidates[:younger], time.reads


def version_facts(ds: lance.LanceDataset, storage_options: Mapping[str, str] | None,
                  cutoff: datetime, retain: int | None) -> tuple[int, list[int]]:
    """(how many versions the table has, those cleanup would remove), from the listing when it
    can be read, else from ``versions()``."""
    listed = listed_versions(ds.uri, storage_options)
    if listed and ds.version in listed:
        try:
            return len(listed), reclaimable(ds, listed, cutoff, retain)[0]
        except (OSError, ValueError) as e:
            if not version_gone(e):  # a concurrent cleanup removed a listed version: read them all
                raise
    versions: list[dict[str, Any]] = ds.versions()
    return len(versions), rules.reclaimable(versions, cutoff, retain)
