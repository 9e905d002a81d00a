"""Every commit (and every step that deletes a table's files) of a request, through the JVM's
commit gate (:func:`cancellation.committing`), said the same way at each site; and the files a
request wrote and has not committed (:func:`stage`), reported to the JVM (the pool removes them
if the worker dies or is killed: the engine action ``discard_staged``) and kept in this process,
so a worker whose JVM died removes its own before it exits (:func:`own_staged`).

A cancel recorded before the gate is asked refuses the step: it raises
:class:`~.cancellation.Cancelled` naming the table, the step, and what earlier commits of the
same statement landed ("nothing was committed" when none did). A cancel recorded once the gate
let the step begin waits for it (the worker is not killed mid-commit) and is told what landed.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

from . import cancellation, hooks
from .cancellation import Cancelled
from .failures import committed_phrase


@contextmanager
def gate(table: str, step: str, earlier: Sequence[int] = ()) -> Iterator[Callable[[str], None]]:
    """The block is ``step`` of ``table`` (a commit, or a deletion of files): it runs only if the
    statement was not cancelled before the gate was asked; inside, call the yielded
    ``landed("version 12")``. ``earlier``: versions this statement committed before (said in a
    refusal; else what its gated steps said they landed)."""
    def refused(why: str) -> Cancelled:
        said = committed_phrase(list(earlier), "the cancel") if earlier else landed_before()
        return Cancelled(f"table {table}: {step} cancelled before it began ({why}); {said}")

    with committing(f"table {table}: {step}", refused) as landed:
        yield landed


def landed_before() -> str:
    """What the current statement's gated steps landed so far, for a refusal: "nothing was
    committed", or "version 12 (table db.t: ...) was committed before the cancel; nothing after"."""
    with _lock:
        said = list(_landed.get(id(cancellation.current_probe()), ()))
    if not said:
        return "nothing was committed"
    return f"{'; '.join(said)} {'were' if len(said) > 1 else 'was'} committed before the cancel; nothing after"


@contextmanager
def committing(what: str, cancelled: Callable[[str], BaseException]) -> Iterator[Callable[[str], None]]:
    """:func:`cancellation.committing` for a site that says its own refusal (``cancelled(why)``:
    a compaction's, with the files it removed), with the test hold of :func:`gate`."""
    hooks.at_gate()  # tests: a cancel lands here, at a known moment before the gate decides
    me = id(cancellation.current_probe())

    def said(text: str) -> None:
        landed(text)
        if cancellation.current_probe() is not None:  # a statement of the engine's (forget() ends it)
            with _lock:
                _landed.setdefault(me, []).append(f"{text} ({what})")

    # In flight until it ends: a worker whose JVM died waits for it before it removes what the
    # statement staged (own_staged), or that commit could land referencing files just removed.
    with _lock:
        _in_flight[me] = _in_flight.get(me, 0) + 1
    try:
        with cancellation.committing(what, cancelled) as landed:
            yield said
    finally:
        with _lock:
            _in_flight[me] -= 1
            if not _in_flight[me]:
                del _in_flight[me]
            _settled.notify_all()


# Files staged by the requests this process serves: (statement, uri) -> (paths, storage options).
_lock = threading.Lock()
_staged: dict[tuple[int, str], tuple[tuple[str, ...], dict[str, str]]] = {}
# What each statement's gated steps landed (statement -> texts), for a later refusal's words.
_landed: dict[int, list[str]] = {}
# Gated steps under way, by statement, and their end (own_staged waits for them).
_in_flight: dict[int, int] = {}
_settled = threading.Condition(_lock)


def stage(uri: str, paths: Sequence[str], storage_options: Mapping[str, str] | None = None) -> None:
    """The current request has written (or is about to write) ``paths`` (relative to table
    location ``uri``: ``_indices/<uuid>``, ``data/<file>``) and not committed them; the list
    replaces what it staged before under ``uri`` (empty: nothing any more)."""
    statement = cancellation.current_probe()
    if statement is None:  # outside the engine: no pool to tell, no statement to forget it
        return
    key = (id(statement), uri)
    with _lock:
        if paths:
            _staged[key] = (tuple(sorted(set(paths))), dict(storage_options or {}))
        else:
            _staged.pop(key, None)
    cancellation.staged(uri, sorted(set(paths)))


def add(uri: str, paths: Sequence[str], storage_options: Mapping[str, str] | None = None) -> None:
    """:func:`stage` ``paths`` besides what the request staged under ``uri`` already."""
    key = (id(cancellation.current_probe()), uri)
    with _lock:
        known = _staged.get(key, ((), {}))[0]
    stage(uri, list(known) + list(paths), storage_options)


def drop(uri: str, paths: Sequence[str]) -> None:
    """``paths`` are no longer staged by the current request (committed, or removed by it)."""
    key = (id(cancellation.current_probe()), uri)
    gone = set(paths)
    with _lock:
        known, storage = _staged.get(key, ((), {}))
    stage(uri, [p for p in known if p not in gone], storage)


def own_staged(wait: float = 0.0) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Everything the requests of this process staged and have not committed, by table
    location (what a worker whose JVM died removes before it exits). Gated steps under way (a
    commit begun before the JVM died, which no kill stops now) are waited for, at most ``wait``
    seconds: what a statement whose step is still under way staged is left out (left for
    cleanup), since that commit may yet land referencing it. No step begins any more: the gate
    cannot ask the dead JVM, so it refuses."""
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    with _lock:
        _settled.wait_for(lambda: not _in_flight, timeout=max(0.0, wait))
        for (statement, uri), (paths, storage) in _staged.items():
            if statement in _in_flight:
                continue
            known = out.setdefault(uri, ([], storage))[0]
            known += [p for p in paths if p not in known]
    return out


def forget() -> None:
    """The current request was answered: what it staged is no longer this process's to remove."""
    me = id(cancellation.current_probe())
    with _lock:
        for key in [k for k in _staged if k[0] == me]:
            del _staged[key]
        _landed.pop(me, None)
