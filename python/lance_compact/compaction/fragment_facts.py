"""A table's fragments at one version as columns: ids, physical rows and deleted rows, each a
numpy array in id order, read in one pass over Lance's fragment handles; the bytes of all
data files from the version's own summary.

Why columns: ``LanceFragment.metadata`` builds a Python ``FragmentMetadata`` (with its
``DataFile`` and ``DeletionFile`` objects) per fragment, about 10 us each; at 100,001 fragments
the layout report built them five times over (6.7 s, against 0.09 s for Lance's own planner).
Here a fragment costs two or three attribute reads on its native handle, nothing of it
outlives the pass, and what is kept is 24 bytes a fragment in three arrays.

The pass takes the ids from ``LanceDataset.fragment_ids()`` (a bitmap) and reads each
fragment's native handle (``LanceDataset._ds.get_fragment``: ``physical_rows``,
``deletion_file()``, ``num_deletions``, ``data_files()``), the object behind the public
``LanceFragment``'s properties of the same names, without the public wrapper's construction
(it doubles the cost), one handle at a time (all at once they take 256 bytes a fragment).
Data file sizes are not read per fragment (building their ``DataFile`` objects doubles the
pass): the total is ``LanceDataset.get_version()``'s summary, which Lance computes from the
loaded manifest; :func:`data_bytes_of` reads them for the fragments a caller names. Pinned to
pylance 14.0.2: ``tests/test_fragment_facts.py`` checks every figure against the public
``metadata``; the public route is taken where the native one is missing.

:func:`task_facts` reads a Lance ``CompactionTask``'s fragments from its JSON (the
serialization Lance ships tasks to executors in) without building the task's fragment objects.
"""
from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np


def _handle(dataset: Any) -> Any:
    native = getattr(getattr(dataset, "_ds", None), "get_fragment", None)
    return native if native is not None else (lambda i: dataset.get_fragment(i)._fragment)


def handles(dataset: Any, ids: Iterable[int] | None = None) -> Iterator[tuple[int, Any]]:
    """(id, native handle) of every fragment of ``dataset`` (or of ``ids``), in id order, one at
    a time: a handle answers ``physical_rows``, ``deletion_file()`` (its path),
    ``num_deletions`` and ``data_files()`` as the public ``LanceFragment`` does."""
    handle = _handle(dataset)
    for fid in (dataset.fragment_ids() if ids is None else ids):  # a bitmap: ascending order
        yield fid, handle(fid)


def file_path(data_file: Any) -> str:
    """A ``DataFile``'s path: pylance 14.0.2's ``path`` property builds a class on every read
    (a string callable as the former method; 75 us), its ``_path`` holds the string."""
    path = getattr(data_file, "_path", None)
    return path if isinstance(path, str) else data_file.path


def data_paths(dataset: Any) -> set[str]:
    """The paths (under ``data/``) of every data file ``dataset`` references."""
    return {file_path(d) for _, f in handles(dataset) for d in f.data_files()}


def data_bytes_of(dataset: Any, ids: Iterable[int]) -> int | None:
    """Bytes of the data files of fragments ``ids``, as Lance recorded them; None when a size
    was not recorded (a figure not measured is not reported)."""
    total = 0
    for _, f in handles(dataset, ids):
        for d in f.data_files():
            if d.file_size_bytes is None:
                return None
            total += d.file_size_bytes
    return total


@dataclass(frozen=True)
class FragmentFacts:
    """Per fragment, in id order: ``ids``, ``physical`` rows and ``deleted`` rows; ``bytes``:
    of every data file of the version (Lance's summary)."""

    ids: np.ndarray
    physical: np.ndarray
    deleted: np.ndarray
    bytes: int | None

    @staticmethod
    def of(dataset: Any) -> "FragmentFacts":
        """The facts of ``dataset`` (a ``LanceDataset``) at its version: one fragment handle
        at a time, so what the pass holds besides the columns does not grow with the table."""
        every = dataset.fragment_ids()  # a bitmap: ascending order
        ids = np.fromiter(every, np.int64, len(every))
        summary = dataset.get_version().get("metadata") or {}
        handle = _handle(dataset)
        physical = array("q")  # typed: 8 bytes a fragment, no Python int kept
        if str(summary.get("total_deletion_files")) == "0":  # the summary says none: not asked
            for fid in every:
                physical.append(handle(fid).physical_rows)
            deleted = np.zeros(len(ids), np.int64)
        else:
            counts = array("q")
            for fid in every:
                f = handle(fid)
                physical.append(f.physical_rows)
                counts.append((f.num_deletions or 0) if f.deletion_file() is not None else 0)
            deleted = np.frombuffer(counts, np.int64).copy()
        size = summary.get("total_files_size")
        return FragmentFacts(ids, np.frombuffer(physical, np.int64).copy(), deleted,
                             int(size) if size is not None else None)

    @staticmethod
    def of_metadata(fragments: Iterable[Any]) -> "FragmentFacts":
        """The facts of ``FragmentMetadata`` objects a caller holds already (a task's, a version's)."""
        rows, size = [], 0
        for m in fragments:
            d = m.deletion_file
            for x in m.files:
                size = None if size is None or x.file_size_bytes is None else size + x.file_size_bytes
            rows.append((m.id, m.physical_rows, (d.num_deleted_rows or 0) if d is not None else 0))
        rows.sort()
        a = np.array(rows, np.int64).reshape(-1, 3)
        return FragmentFacts(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), size)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def live(self) -> np.ndarray:
        return self.physical - self.deleted

    @property
    def rows(self) -> int:
        return int(self.live.sum())

    @property
    def deleted_rows(self) -> int:
        return int(self.deleted.sum())

    def small(self, target: int) -> np.ndarray:
        """Which fragments hold fewer live rows than ``target`` (rules.is_small)."""
        return self.live < target

    def over_threshold(self, threshold: float) -> np.ndarray:
        """Which fragments' deleted rows exceed ``threshold`` of their physical rows
        (rules.over_deletion_threshold)."""
        physical = np.maximum(self.physical, 1)
        return (self.physical > 0) & (self.deleted / physical > threshold)

    def deleted_fractions(self) -> np.ndarray:
        return np.where(self.physical > 0, self.deleted / np.maximum(self.physical, 1), 0.0)

    def candidates(self, target: int, threshold: float) -> np.ndarray:
        """Which fragments Lance's planner would take (rules.Thresholds.is_candidate)."""
        return self.small(target) | self.over_threshold(threshold)

    def positions(self, fragment_ids: Iterable[int] | np.ndarray) -> np.ndarray:
        """Where each of ``fragment_ids`` (fragments of this table) sits in the columns."""
        wanted = np.asarray(fragment_ids if isinstance(fragment_ids, np.ndarray) else list(fragment_ids),
                            np.int64)
        at = np.searchsorted(self.ids, wanted)
        if len(wanted) and (at.max() >= len(self.ids) or (self.ids[at] != wanted).any()):
            raise KeyError("a fragment id that is not the table's at this version")
        return at


# In a task's JSON (the serialization Lance ships tasks to executors in, serde's field order):
# a fragment's ``id`` comes first and its ``files`` next, which a deletion file's own ``id``
# never is; every fragment has one ``physical_rows``; a deletion file carries
# ``num_deleted_rows``.
_FRAGMENT_START = re.compile(r'\{"id":(\d+),"files":')
_PHYSICAL = re.compile(r'"physical_rows":(\d+)')
_SIZE = re.compile(r'"file_size_bytes":(\d+)')
_DELETED = re.compile(r'"num_deleted_rows":(\d+|null)')


@dataclass(frozen=True)
class TaskFacts:
    """A ``CompactionTask``'s fragments: ``ids`` in the task's order, ``physical`` and
    ``deleted`` rows of each, and the bytes of all their data files (None when a size was not
    recorded)."""

    ids: np.ndarray
    physical: np.ndarray
    deleted: np.ndarray
    bytes: int | None


def task_facts(task_json: str, start: int = 0, end: int | None = None) -> TaskFacts:
    """The facts of a task from its ``json()`` (or from ``task_json[start:end]``, a task's
    span of its plan's JSON, read in place), read without building its fragment objects
    (``json.loads`` of a 100,000-fragment task takes 0.8 s; this, about 0.1 s); parsed in full
    when the text is not as expected."""
    end = len(task_json) if end is None else end
    ids = _ints(_FRAGMENT_START.findall(task_json, start, end))
    physical = _ints(_PHYSICAL.findall(task_json, start, end))
    if len(ids) != len(physical):
        return _parsed(task_json[start:end])
    size: int | None = None if task_json.find('"file_size_bytes":null', start, end) >= 0 else int(
        _ints(_SIZE.findall(task_json, start, end)).sum())
    deleted = np.zeros(len(ids), np.int64)
    if task_json.find('"deletion_file":{', start, end) >= 0:
        # A fragment's deletion file comes before its ``physical_rows``: the fragment a count
        # belongs to is the number of ``physical_rows`` before it (counted in C between one
        # count and the next; a tenth of 1,000,000 fragments with deletions, not a match
        # object for every fragment).
        at, counts, seen, last = [], [], 0, start
        for m in _DELETED.finditer(task_json, start, end):
            seen += task_json.count('"physical_rows":', last, m.start())
            last = m.start()
            if m.group(1) != "null":
                at.append(seen)
                counts.append(m.group(1))
        if at:
            if at[-1] >= len(ids):
                return _parsed(task_json[start:end])
            deleted[np.array(at, np.int64)] = _ints(counts)
    return TaskFacts(ids, physical, deleted, size)


def _ints(decimals: list[str]) -> np.ndarray:
    """The int64 array of ``decimals``, parsed in C (``np.array`` of the strings converts each
    through a Python int: 0.15 s a million)."""
    if not decimals:
        return np.zeros(0, np.int64)
    return np.fromstring(" ".join(decimals), dtype=np.int64, sep=" ")


def _parsed(task_json: str) -> TaskFacts:
    import json

    parsed = json.loads(task_json)
    frags = (parsed["task"] if "task" in parsed else parsed)["fragments"]  # a task or its body
    # every file the fragments name (data files and any overlay's), as the fast route counts them
    size = None if '"file_size_bytes":null' in task_json else int(_ints(_SIZE.findall(task_json)).sum())
    return TaskFacts(np.array([f["id"] for f in frags], np.int64),
                     np.array([f["physical_rows"] for f in frags], np.int64),
                     np.array([(f.get("deletion_file") or {}).get("num_deleted_rows") or 0 for f in frags],
                              np.int64), size)


def original_facts(result: Any) -> TaskFacts:
    """The facts of a ``RewriteResult``'s original fragments, read from its ``json()`` (its
    ``original_fragments`` field up to ``row_addrs``, serde's order) without building a Python
    object per fragment; from the objects when the text is not as expected."""
    text = result.json()
    start, end = text.find('"original_fragments":['), text.find(',"row_addrs":')
    if start < 0 or end < start:
        return _of_metadata(result.original_fragments)
    return task_facts(text[start:end])


def _of_metadata(fragments: Iterable[Any]) -> TaskFacts:
    facts = FragmentFacts.of_metadata(fragments)
    return TaskFacts(facts.ids, facts.physical, facts.deleted, facts.bytes)
