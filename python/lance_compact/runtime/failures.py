"""What a failure raised by Lance (or Spark) is, for the user: the rules that name it.

Lance raises ``OSError``/``ValueError``/``RuntimeError`` (and pyarrow's ``ArrowInvalid``) with
the Rust error's text; the kind of failure is only in that text. :func:`classify` reads it
into one of:

- ``conflict``: another writer committed an incompatible change (which operation: Delete,
  Update, Rewrite, Overwrite, Restore, Merge, CreateIndex, ...);
- ``storage``: the object store (or the catalog service that vends its credentials) was
  unreachable or refused (timeout, connection, HTTP 403,
  404, throttling 429/503, 5xx), or the storage is full (no space left on a disk, a disk
  quota, an object store's quota or HTTP 507 Insufficient Storage): a storage failure, not a
  bug;
- ``missing``: the table (its ``_versions`` folder) does not exist;
- ``corrupt``: a file the table references is corrupt, truncated or missing (Lance's file
  reader refusing a footer or metadata it cannot make sense of included: it calls that
  "invalid user input");
- ``worker_lost``: a process doing a Spark task died or was lost: an executor's Python worker
  (crashed or killed: Spark's "Python worker exited unexpectedly", the JVM's end of its socket
  reset or at EOF) or the executor itself (``ExecutorLostFailure``: its JVM died, its heartbeat
  timed out, "Remote RPC client disassociated"), after Spark's task retries (:func:`lost`);
- ``config``: the table's config holds a ``lance.compaction.*`` value Lance cannot use
  (written by another tool): every compaction fails until it is fixed or removed;
- ``bug``: anything else (not recognized: possibly a bug, ours or Lance's). Its phrase asks
  for a report with the engine's log and names that log's file (``$LANCE_COMPACT_ENGINE_LOG``,
  which the JVM gives the engine: ``spark.lance.compact.engine.log`` or its temporary file);
  classifying one writes its traceback there once (:func:`keep_traceback`).

Messages built from a :class:`Failure` always contain, for other code and tests to rely on:
"died" or "was lost" for a lost worker (:data:`WORKER_DIED`, :data:`EXECUTOR_LOST`),
"object store" for storage faults ("storage failure" and "full" for a full disk or
quota), "concurrent" and the operation for conflicts, "does not
exist" for a missing table.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping

log = logging.getLogger(__name__)

# The engine's log file, as the JVM started the engine (EngineProcess.scala): the engine's
# stdout and stderr, where its log records go.
ENGINE_LOG_ENV = "LANCE_COMPACT_ENGINE_LOG"

CONFLICT, STORAGE, MISSING, CORRUPT, BUG = "conflict", "storage", "missing", "corrupt", "bug"
CONFIG = "config"
WORKER_LOST = "worker_lost"

# What a lost process is, for the user (engine.py's failure_kind knows them by these words).
WORKER_DIED = "an executor's Python worker died (crashed, or killed: e.g. by the system's out-of-memory killer)"
EXECUTOR_LOST = "the executor running the task was lost"
# Spark's words for an executor lost (TaskEndReason ExecutorLostFailure and its reasons).
_EXECUTOR_GONE = ("executorlostfailure", "executor heartbeat timed out", "remote rpc client disassociated",
                  "executor decommission", "container killed", "container from a bad node")
# The failure Spark gave up on: "most recent failure: Lost task 0.2 in stage 3.0 (TID 7) (host
# executor 1): <its error>"; its error's first line.
_LAST_FAILURE = re.compile(r"most recent failure: Lost task [\d.]+ in stage [\d.]+ \(TID \d+\) \([^)]*\): ([^\n]*)")
_EXECUTOR_REASON = re.compile(r"(ExecutorLostFailure \([^)]*\))(?: Reason: ([^.\n]*))?")

_BAD_PROPERTY = re.compile(r"invalid value for (lance\.compaction\.[\w.]+): ('[^']*'|\S+)", re.I)

# Lance 14.0.2 parses a column name as a path, with back-quotes as quotes: a top-level column
# whose name holds one can be created but never projected, filtered on or rewritten.
_QUOTED_COLUMN = re.compile(r'(?:No field named "|Column "?)((?:[^"\s]|\s(?!does))*`[^"]*?)"?(?:\.| does not exist)')
# It backtracks far over a long run of back-quotes (a 30,000-character table path held the GIL,
# so the worker's heartbeat, for over 60 s: the worker was killed as hung), so it reads a bounded
# window after each of the first few places its words start: a column's name is at most
# identifiers.MAX_COLUMN_NAME characters.
_QUOTED_COLUMN_START = re.compile(r'No field named "|Column ')
_QUOTED_COLUMN_WINDOW, _QUOTED_COLUMN_TRIES = 512, 16


def _quoted_column(text: str) -> re.Match[str] | None:
    """:data:`_QUOTED_COLUMN` in ``text``, matched within bounded windows (linear in ``text``)."""
    for i, start in enumerate(_QUOTED_COLUMN_START.finditer(text)):
        if i == _QUOTED_COLUMN_TRIES:
            return None
        m = _QUOTED_COLUMN.match(text, start.start(), start.start() + _QUOTED_COLUMN_WINDOW)
        if m:
            return m
    return None
# A catalog service that did not answer (runtime/catalog_service.py), also when Lance met it
# refreshing a table's storage options deep inside a read or a commit.
_SERVICE_DOWN = re.compile(r"catalog service \S+(?: at \S+)? did not answer")
# A catalog service's answer refused (runtime/catalog_service.py, runtime/vended.py): a vended
# storage option that is no credential, or a location, also when Lance met it refreshing.
_SERVICE_REFUSED = re.compile(r"catalog service \S+(?: at \S+)?: table \S+: (?:the storage option .*? it vends is "
                              r"refused.*?spark\.sql\.catalog\.<catalog>\.storage\.[^\s,)]+|the location .*?"
                              r"(?:is outside the catalog's root \S+; refused|is refused: it holds [^(\n]*))")
_VERSION_GONE = re.compile(r"_versions/[^/\s]+\.manifest was not found")
_OPERATION = re.compile(r"concurrent transaction (\w+)", re.I)
_HTTP = re.compile(r"status code: (\d{3})\s*([A-Za-z][A-Za-z ]*[A-Za-z])?")
_STORE = ("generic s3 error", "generic gcs error", "generic azure error", "generic http error",
          "generic microsoftazure error", "generic gcp error", "object_store", "objectstore",
          "error sending request", "http error", "dns error", "connection refused",
          "connection reset", "timed out", "operation timed out", "broken pipe", "slowdown",
          "slow down", "throttl", "non-2xx status code")
_CORRUPT = ("invalid range", "does not have sufficient data", "corrupt", "unexpected eof",
            "failed to fill whole buffer", "unexpected end of file",
            "invalid file", "not a lance file", "file size is too small", "bad magic", "magic number", "checksum",
            "failed to decode", "decode error", "protobuf", "invalid footer", "out of range for",
            # Lance's file reader on a damaged footer or metadata ("Invalid user input: ...")
            "lance-file/src/reader", "error reading file metadata", "not aligned to",
            "global buffer", "metadata region", "outside file of size", "tail read position",
            "does not appear to be a lance file", "invalid magic")
# A full disk or quota: ENOSPC (errno 28) and EDQUOT (122) as Python and Lance word them, and
# object stores' quota refusals (HTTP 507 Insufficient Storage, QuotaExceeded, ...).
_FULL = ("no space left on device", "os error 28", "errno 28]", "disk quota exceeded", "os error 122",
         "errno 122]", "insufficient storage", "insufficientstorage", "status code: 507", "quotaexceeded",
         "quota exceeded", "exceeded the quota", "exceeded your quota", "over quota", "storage quota",
         "enospc", "edquot")
_HTTP_WHAT = {
    400: "the store rejected the request",
    401: "the store did not accept the credentials",
    403: "access denied: check the credentials and the bucket's policy",
    404: "a path the table needs is not in the store (or the bucket does not exist)",
    408: "the store timed out the request",
    409: "the store reported a conflicting request",
    412: "a conditional write was refused",
    429: "the store is throttling requests: retry later or with fewer concurrent tasks",
    500: "the store failed: retry later",
    507: "the store is out of space or over its quota (a storage failure): free space or raise the quota",
    502: "a gateway in front of the store failed: retry later",
    503: "the store is unavailable or throttling (SlowDown): retry later",
    504: "a gateway in front of the store timed out: retry later",
}


@dataclass(frozen=True)
class Failure:
    """What a failure is (``kind``), a phrase saying so for the user, and for a conflict the
    concurrent operation."""

    kind: str
    phrase: str
    operation: str | None = None
    detail: str = ""  # the first part of the original text, without source locations

    def __str__(self) -> str:
        return self.phrase


def first_part(text: str, limit: int = 300) -> str:
    """The original message without Rust source locations and stack traces, shortened."""
    text = text.strip()
    if "\n\tat " in text or "\nTraceback" in text:
        text = text.splitlines()[0]
    text = re.sub(r",\s*(/[^\s,]+|[\w./-]+\.rs):\d+:\d+", "", text)
    text = text.replace("External error: ", "").strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _storage(low: str) -> str:
    m = _HTTP.search(low)
    if m:
        code = int(m.group(1))
        reason = f" {m.group(2).title()}" if m.group(2) else ""
        what = _HTTP_WHAT.get(code) or ("the store failed: retry later" if code >= 500
                                        else "the store refused the request")
        kind = "refused access" if code in (401, 403) else "error"
        return f"object store {kind} (HTTP {code}{reason}): {what}"
    if "slowdown" in low or "slow down" in low or "throttl" in low:
        return "object store error (throttling, SlowDown): retry later or with fewer concurrent tasks"
    if "timed out" in low or ("timeout" in low and "retry_timeout" not in low):
        return "object store timed out (no answer in time): check the endpoint and the network"
    if "connection refused" in low:
        return "object store unreachable (connection refused): check the endpoint"
    if "connection reset" in low or "broken pipe" in low:
        return "object store unreachable (connection reset): retry later"
    if "dns error" in low:
        return "object store unreachable (the endpoint's name does not resolve)"
    if "error sending request" in low or "http error" in low:
        return ("object store unreachable (the request could not be sent: connection refused, "
                "reset or timed out): check the endpoint and the network")
    return "object store error"


def _full(low: str) -> str:
    """The phrase for a full disk or quota."""
    what = "a storage failure, not a lance_compact bug: free space or raise the quota, then run it again"
    if "507" in low or "insufficient storage" in low or "insufficientstorage" in low:
        return f"storage full: the object store is out of space or over its quota (HTTP 507 Insufficient Storage); {what}"
    if any(s in low for s in _STORE) or ("quota" in low and ("s3" in low or "gcs" in low or "azure" in low)):
        return f"storage full: the object store refused the write (quota exceeded); {what}"
    if "quota" in low or "os error 122" in low or "errno 122]" in low or "edquot" in low:
        return f"storage full: the disk quota is used up (EDQUOT); {what}"
    return f"storage full: no space left on the device (ENOSPC); {what}"


def lost(error: BaseException | str) -> Failure | None:
    """A Spark job's failure (its Py4J error or text) that is a process lost, not the task's own
    error: the executor running the task lost, or its Python worker dead. Spark words the
    worker's death as "Python worker exited unexpectedly (crashed)", or as the JVM's end of the
    worker's socket failing (``java.io.EOFException``, ``java.net.SocketException: Connection
    reset`` / ``Broken pipe``): a JVM exception, where a Lance error (the object store's
    "connection reset" included) always comes wrapped in a ``PythonException``. None when the
    failure is anything else."""
    text = str(error)
    last = _LAST_FAILURE.search(text)
    # Spark's task failure when there is one (the JVM exceptions below mean a death only there)
    said = last.group(1) if last else text
    low = said.lower()
    if any(w in low for w in _EXECUTOR_GONE):
        m = _EXECUTOR_REASON.search(said)
        why = (f"{m.group(1)}: {m.group(2).strip()}" if m.group(2) else m.group(1)) if m else said
        return Failure(WORKER_LOST, f"{EXECUTOR_LOST} (its JVM died or stopped answering)", None, first_part(why))
    if last and said.startswith("org.apache.spark.api.python.PythonException"):
        # the task's Python raised: a death only when the worker's own read of its socket ended
        if re.search(r"^EOFError\b", text, re.M) and "pyspark/serializers.py" in text:
            return Failure(WORKER_LOST, WORKER_DIED, None, "EOFError: the worker's connection to its executor ended")
        return None
    if ("python worker exited unexpectedly" in low or "crashed python worker" in low
            or (last and said.startswith(("java.io.EOFException", "java.net.SocketException")))):
        return Failure(WORKER_LOST, WORKER_DIED, None, first_part(said.split(". Consider setting")[0]))
    return None


def classify(error: BaseException | str, keep: bool = True) -> Failure:
    """Name what ``error`` (an exception from Lance, or its text) is. An unexpected one (BUG)
    has its traceback written to the engine's log (:func:`keep_traceback`) unless ``keep`` is
    false (the caller keeps the error it came from)."""
    dead = lost(error)
    if dead is not None:
        return dead
    text = str(error)
    low = text.lower()
    detail = first_part(text)
    if ("commit conflict" in low or "preempted by concurrent transaction" in low
            or "incompatible with concurrent transaction" in low or "concurrent transaction" in low):
        m = _OPERATION.search(text)
        op = m.group(1) if m else "change"
        return Failure(CONFLICT, f"a concurrent {op} by another writer conflicts with this change", op, detail)
    m = _quoted_column(text)
    if m:
        name = m.group(1)
        path = "`" + name.replace("`", "``") + "`"
        return Failure(CONFIG, f"the table has a column named {name!r}, with a back-quote in its name, which "
                               f"Lance cannot read, filter on or rewrite (it takes the back-quote for a quote); "
                               f"rename the column with pylance: dataset.alter_columns({{'path': {path!r}, "
                               f"'name': '<new name>'}})", None, detail)
    m = _BAD_PROPERTY.search(text)
    if m:
        key, value = m.group(1), m.group(2)
        return Failure(CONFIG, f"the table property {key} holds a value Lance cannot use ({value}); "
                               f"every compaction of the table fails until it is removed with ALTER TABLE "
                               f"<table> UNSET TBLPROPERTIES ('{key}') or set to a valid value", None, detail)
    # Lance says "Dataset at path X was not found: Not found: X/_versions" for a missing table,
    # and "... _versions/N.manifest was not found" for a missing version.
    if "was not found" in low and "dataset at path" in low:
        if _VERSION_GONE.search(low):  # an old version cleanup removed, not the table
            return Failure(MISSING, "a version of the table does not exist (removed by cleanup, or never written)", None, detail)
        return Failure(MISSING, "the table does not exist", None, detail)
    m = _SERVICE_REFUSED.search(text)
    if m:
        return Failure(CONFIG, m.group(0).strip(), None, detail)
    m = _SERVICE_DOWN.search(text)
    if m:
        return Failure(STORAGE, f"{m.group(0)} (the table's location and storage credentials come from "
                                "it): check the service, then run it again", None, first_part(text[m.start():]))
    if any(s in low for s in _FULL):
        return Failure(STORAGE, _full(low), None, detail)
    if any(s in low for s in _STORE):
        return Failure(STORAGE, _storage(low), None, detail)
    if "commit result" in low and "unknown" in low:
        # Lance wrote the manifest but could not read the store's answer or the version back.
        return Failure(STORAGE, "object store error (the answer to the commit was lost and the "
                                "version could not be read back)", None, detail)
    if "not found" in low and "/data/" in low:
        return Failure(CORRUPT, "a data file the table references is missing", None, detail)
    if any(s in low for s in _CORRUPT):
        return Failure(CORRUPT, "a corrupt or unreadable file", None, detail)
    if "no such file" in low or "not found" in low:
        return Failure(MISSING, "a file or table does not exist", None, detail)
    if keep:
        keep_traceback(error)
    return Failure(BUG, bug_phrase(), None, detail)


def engine_log() -> str | None:
    """The engine's log file, when this process is the engine the JVM started (else None: an
    executor's Python worker, a test calling the engine's code)."""
    return os.environ.get(ENGINE_LOG_ENV) or None


def bug_phrase() -> str:
    """What an unexpected error is, for the user: a request to report it with the engine's log,
    naming the file when this process knows it."""
    where = engine_log()
    named = f"the engine's log, {where}, which holds its traceback" if where else "the engine's log"
    return ("an unexpected error (none lance_compact recognizes: Lance's words follow; if the input was "
            f"valid, please report it with {named})")


# What keep_traceback logged lately (an exception that does not take an attribute, a text):
# each is logged once however many times it is classified.
_LOGGED: OrderedDict[object, None] = OrderedDict()
_LOGGED_LOCK = threading.Lock()
_MARK = "_lance_compact_traceback_logged"


def _first_time(key: object, error: BaseException | None) -> bool:
    if error is not None:
        if getattr(error, _MARK, False):
            return False
        try:
            setattr(error, _MARK, True)
            return True
        except (AttributeError, TypeError):  # no __dict__: remembered by identity below
            key = id(error)
    with _LOGGED_LOCK:
        if key in _LOGGED:
            return False
        _LOGGED[key] = None
        while len(_LOGGED) > 256:
            _LOGGED.popitem(last=False)
    return True


def keep_traceback(error: BaseException | str, what: str = "an unexpected error",
                   storage_options: Mapping[str, str] | None = None) -> None:
    """Write ``error``'s traceback to this process's log (the engine's: its file is
    :func:`engine_log`), once per error, at ERROR: the user's message names the log, and the log
    must say where it came from. ``error`` as text (a task's failure read from a Spark job's
    error) is logged with the exception being handled, whose text holds the task's own
    traceback, else with the stack that classified it. Secret storage values are redacted (the
    log's own filter also redacts the operator's and the request's)."""
    active = error if isinstance(error, BaseException) else sys.exc_info()[1]
    if not _first_time(str(error) if active is None else None, active):
        return
    from .secrets import redact

    if active is not None and active.__traceback__ is not None:
        trace = "".join(traceback.format_exception(type(active), active, active.__traceback__))
    else:
        trace = (f"{type(active).__name__}: {active}\n" if active is not None else "") + \
            "raised without a traceback; classified at:\n" + "".join(traceback.format_stack(limit=12)[:-1])
    text = first_part(str(error))
    log.error("%s: %s\n%s", what, redact(text, storage_options), redact(trace.rstrip(), storage_options))


def describe(error: BaseException | str) -> str:
    """``phrase (original text)``: what the failure is, then what Lance said."""
    return _described(classify(error))


def _described(f: Failure) -> str:
    return f"{f.phrase} ({f.detail})" if f.detail else f.phrase


def committed_phrase(versions: list[int], after: str = "the failure") -> str:
    """What was committed before a failure, truthfully: e.g. 'versions 5 and 7 were committed
    before the failure; nothing after' or 'nothing was committed'."""
    if not versions:
        return "nothing was committed"
    if len(versions) == 1:
        return f"version {versions[0]} was committed before {after}; nothing after"
    listed = ", ".join(str(v) for v in versions[:-1]) + f" and {versions[-1]}"
    return f"versions {listed} were committed before {after}; nothing after"


_TASK_ERROR = re.compile(r"^([A-Za-z_][\w.]*): (.+)$", re.M)  # an unindented "Type: message" line


def job_failure(error: BaseException | str) -> str:
    """What failed a Spark job of ours, for the user: the executor's own error (the last
    ``Type: message`` line of the Python traceback Spark wraps in a Py4JJavaError, whose
    first line only says which JVM call failed), named by :func:`describe`."""
    text = str(error)
    dead = lost(text)
    if dead is not None:
        return _described(dead)
    said = text
    if "Traceback (most recent call last)" in text:
        lines = [m for m in _TASK_ERROR.finditer(text.split("Traceback (most recent call last)", 1)[1])
                 if not m.group(1).startswith(("org.", "java.", "py4j."))]
        if lines:
            said = f"{lines[-1].group(1)}: {lines[-1].group(2)}"
    f = classify(said, keep=False)
    if f.kind == BUG:  # the whole error into the engine's log: its text holds the task's traceback
        keep_traceback(error)
    return _described(f)
