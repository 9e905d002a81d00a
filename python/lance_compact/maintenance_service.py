"""A warehouse kept maintained by a long-running Spark application::

    python -m lance_compact.maintenance_service --warehouse s3://bucket/wh --every 10m \\
        --min-interval 1h --param max_duration='10 minutes' [--namespace db] [--rounds N]

    python -m lance_compact.maintenance_service --properties-file /etc/lance/warehouse.properties

(the properties file holding ``spark.sql.catalog.lance.warehouse`` and its ``storage.*`` keys)

    spark-submit --master spark://... --jars "$(python -c 'import lance_compact as l; print(l.jar_path())')" \\
        "$(python -c 'import lance_compact.maintenance_service as m; print(m.__file__)')" --every 10m ...

Every ``--every`` it runs one ``CALL lance.maintain_warehouse`` (the same procedure SQL users
call, with ``--param key=value`` as its arguments). Between rounds it remembers, per table (in
memory; with ``--state FILE`` also in that file, written after each round and read at the start,
so each ``--rounds 1`` run of a scheduler goes on from the last one's):

- when it was last maintained: tables maintained less than ``--min-interval`` ago are passed
  as ``exclude`` (the procedure reports them as skipped);
- how often it failed in a row: a failing table is left alone for ``--backoff`` after its
  first failure, doubling after each further one, at most ``--max-backoff``.

Each round prints one JSON line: ``maintained`` and ``failed`` (table names), ``errors`` (each
failed table's step and the first line of its error), ``excluded`` (tables left out, backed off
or maintained recently, and why), ``tables`` and ``seconds``.
``--rounds N`` stops after N rounds. ``--param fail_on_error=true`` does not fail a round (the
service needs every table's row for its back-off): it makes the process exit with status 1 when
it stops, if a table failed in any of its rounds or a round failed (the last JSON line lists
them), so a scheduler running ``--rounds 1`` sees the failure. SIGTERM or SIGINT stops it cleanly: during a round the
round finishes (each table's commits are atomic: a table is either maintained or not), then it
exits; a second signal cancels the round (``cancelAllJobs``, which reaches the statement
whether or not a Spark job of it runs at that moment: nothing starts or commits after it,
what committed before stays), and exits; if the round has not ended ``--stop-timeout`` (30 s)
after that, the process exits all the same (a commit is atomic; files of uncommitted
rewrites are left for ``cleanup``). The figures also reach Spark's metrics system (``EnginePlugin``'s
source ``maintenance.*``) for whatever sink the application configures.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import CompactionError
from .runtime import durations
from .runtime.envelope import DEFAULT_CATALOG
from .runtime.private_conf import (joined, properties_text, read_properties, remove_now, take_properties_file,
                                   write_properties)

log = logging.getLogger("lance_compact.maintenance_service")


def seconds(text: str, flag: str = "a duration") -> float:
    """'90s', '10m', '1h', '2d', '10 minutes', '1 day 12 hours' (or a plain number of
    seconds): the forms every duration takes (runtime/durations.py)."""
    try:
        return durations.seconds(text, flag)
    except CompactionError as e:
        raise argparse.ArgumentTypeError(e.message.removeprefix(f"{flag} ")) from None


def _flag(name: str) -> Any:
    """An argparse type reading flag ``name``'s duration (its errors name the flag)."""
    def parse(text: str) -> float:
        return seconds(text, name)
    parse.__name__ = "duration"
    return parse


def _value(text: str) -> Any:
    """A --param value: integer, true/false, or text."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


@dataclass
class TableState:
    """What the service remembers of one table between rounds (times: seconds since the epoch,
    so that a state file means the same to the next process)."""

    maintained_at: float | None = None
    failures: int = 0
    retry_at: float = 0.0


STATE_FORMAT = 1


def read_state(path: str) -> dict[str, TableState]:
    """The tables' state a former run wrote to ``path``; none when it does not exist yet. A file
    that is not one (unreadable, not this JSON) is a ValueError naming it: the operator pointed
    ``--state`` at something else, which the service must not overwrite."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ValueError(f"--state {path}: cannot read it ({e.strerror or e})") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError("not a state file of this service")
        tables = {}
        for name, t in data["tables"].items():
            maintained = t.get("maintained_at")
            tables[str(name)] = TableState(None if maintained is None else float(maintained),
                                           int(t.get("failures", 0)), float(t.get("retry_at", 0.0)))
        return tables
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--state {path}: not a state file of this service ({e}); "
                         "name a new file or remove this one") from None


def write_state(path: str, tables: dict[str, TableState]) -> None:
    """``tables`` into ``path``, whole or not at all (a temporary file beside it, renamed)."""
    data = {"format": STATE_FORMAT, "tables": {name: {"maintained_at": s.maintained_at, "failures": s.failures,
                                                      "retry_at": s.retry_at}
                                               for name, s in sorted(tables.items())}}
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".maintenance-state-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Service:
    """The rounds, the per-table memory (minimum interval, back-off) and the stop flag."""

    def __init__(self, spark: Any, namespace: str | None, params: dict[str, Any], every: float,
                 min_interval: float, backoff: float, max_backoff: float, catalog: str = DEFAULT_CATALOG,
                 stop_timeout: float = 30.0, state: str | None = None) -> None:
        self.spark, self.namespace, self.params, self.catalog = spark, namespace, dict(params), catalog
        self.every, self.min_interval = every, min_interval
        self.backoff, self.max_backoff = backoff, max_backoff
        self.state = state
        self.tables: dict[str, TableState] = read_state(state) if state else {}
        self.stop = threading.Event()
        self.signals = 0
        self.stop_timeout = stop_timeout
        self.stopped = threading.Event()  # run() returned
        # --param fail_on_error=true: the service's exit status says whether anything failed
        # (the CALL itself never gets it: its rows drive the back-off)
        self.fail_on_error = bool(self.params.pop("fail_on_error", False))
        self.failed: set[str] = set()  # tables that failed in any round
        self.round_errors = 0

    def on_signal(self, signum: int, frame: Any) -> None:
        self.signals += 1
        self.stop.set()
        if self.signals == 1:
            log.warning("signal %d: stopping after the current round", signum)
        elif self.signals == 2:  # abandon: cancel the round from another thread (this one is in a Py4J call)
            log.warning("signal %d again: cancelling the current round", signum)
            threading.Thread(target=self._cancel_round, daemon=True).start()

    def _cancel_round(self) -> None:
        """Cancel the round; exit the process if it has not ended ``stop_timeout`` later."""
        self.spark.sparkContext.cancelAllJobs()
        if not self.stopped.wait(self.stop_timeout):
            log.error("the round did not end %.0f s after it was cancelled: exiting", self.stop_timeout)
            print(json.dumps({"stopped": True, "signal": True, "forced": True}), flush=True)
            remove_now()  # the private properties files: os._exit runs no atexit
            os._exit(3)

    def excluded(self, now: float) -> dict[str, str]:
        """Tables left out of the next round, and why."""
        out = {}
        for name, s in self.tables.items():
            if s.retry_at > now:
                out[name] = f"backed off for {s.retry_at - now:.0f} s after {s.failures} failures"
            elif s.maintained_at is not None and now - s.maintained_at < self.min_interval:
                out[name] = f"maintained {now - s.maintained_at:.0f} s ago"
        return out

    def round(self, number: int) -> dict[str, Any]:
        from .api import maintain_warehouse

        started = time.time()
        excluded = self.excluded(started)
        params = dict(self.params)
        if excluded:
            params["exclude"] = ",".join(sorted(set(excluded) | set(filter(None, str(params.get("exclude", "")).split(",")))))
        rows = maintain_warehouse(self.spark, self.namespace, catalog=self.catalog, **params).collect()
        now = time.time()
        per_table: dict[str, list] = {}
        for r in rows:
            per_table.setdefault(r.table, []).append(r)
        # Every table of the warehouse has a row (excluded, skipped and left ones too): one
        # without is gone (dropped, renamed), and what was kept of it goes (weeks of running
        # must not keep every table that ever existed).
        for name in [n for n in self.tables if n not in per_table]:
            del self.tables[name]
        maintained, failed, errors = [], [], {}
        for name, rs in per_table.items():
            s = self.tables.setdefault(name, TableState())
            if any(r.error for r in rs):
                s.failures += 1
                s.retry_at = now + min(self.max_backoff, self.backoff * 2 ** (s.failures - 1))
                failed.append(name)
                first = next(r for r in rs if r.error)  # why, as its row says it (no secret in a row)
                errors[name] = f"{first.step}: {str(first.error).splitlines()[0]}"
            elif any(r.ran for r in rs):
                s.maintained_at, s.failures, s.retry_at = now, 0, 0.0
                maintained.append(name)
        if self.state:
            write_state(self.state, self.tables)
        return {"round": number, "maintained": sorted(maintained), "failed": sorted(failed),
                "errors": dict(sorted(errors.items())), "excluded": excluded, "tables": len(per_table),
                "seconds": round(now - started, 3)}

    def run(self, rounds: int | None) -> int:
        number = 0
        while not self.stop.is_set() and (rounds is None or number < rounds):
            number += 1
            try:
                report = self.round(number)
                self.failed.update(report["failed"])
            except Exception as e:  # the warehouse could not be listed, say: try again next round
                report = {"round": number, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
                self.round_errors += 1
            print(json.dumps(report), flush=True)
            if rounds is not None and number >= rounds:
                break
            self.stop.wait(self.every)
        stopped: dict[str, Any] = {"stopped": True, "rounds": number, "signal": self.signals > 0}
        if self.fail_on_error:
            stopped.update(failed=sorted(self.failed), failed_rounds=self.round_errors)
        print(json.dumps(stopped), flush=True)
        self.stopped.set()
        return number

    @property
    def exit_status(self) -> int:
        """1 with fail_on_error when a table or a round failed, else 0."""
        return int(self.fail_on_error and bool(self.failed or self.round_errors))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lance_compact.maintenance_service",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warehouse", help="the catalog's warehouse (path or URI; it replaces a --properties-file's); "
                                       "unset: the application's spark.sql.catalog.<catalog>.* settings")
    p.add_argument("--catalog", default=DEFAULT_CATALOG,
                   help=f"the catalog's name in the application (default {DEFAULT_CATALOG})")
    p.add_argument("--namespace", help="maintain only this namespace (and those under it)")
    p.add_argument("--every", type=_flag("--every"), default="10m",
                   help="time between rounds (default 10m; '10m', '10 minutes', '1 hour', '90s', ...)")
    p.add_argument("--min-interval", type=_flag("--min-interval"), default="1h",
                   help="leave a table alone this long after it was maintained (default 1h)")
    p.add_argument("--backoff", type=_flag("--backoff"), default="10m",
                   help="leave a failing table alone this long, doubling per failure in a row (default 10m)")
    p.add_argument("--max-backoff", type=_flag("--max-backoff"), default="1d", help="at most this long (default 1d)")
    p.add_argument("--rounds", type=int, help="stop after this many rounds (default: run until stopped)")
    p.add_argument("--state", metavar="FILE",
                   help="keep what the service remembers of each table (when it was maintained, its failures "
                        "in a row) in this JSON file, read at the start and rewritten after each round, so "
                        "--min-interval and the back-off hold across runs (a scheduler's --rounds 1); "
                        "default: in this process only")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="an argument of CALL lance.maintain_warehouse (max_duration='10 minutes', "
                        "older_than='7 days', max_tables=50, ...); repeatable")
    p.add_argument("--storage", action="append", default=[], metavar="KEY=VALUE",
                   help="a Lance storage option of the warehouse (prefer a --properties-file of "
                        "spark.sql.catalog.<catalog>.storage.* settings: command lines are visible)")
    p.add_argument("--properties-file", metavar="PATH",
                   help="a Spark properties file, as spark-submit reads it (the catalog's warehouse and "
                        "storage.* settings, any Spark setting); its values never reach a command line")
    p.add_argument("--stop-timeout", type=_flag("--stop-timeout"), default="30s",
                   help="after a second SIGTERM/SIGINT, exit this long later if the cancelled round "
                        "has not ended (default 30s)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting; repeatable")
    a = p.parse_args(argv)
    if a.state and not os.access(os.path.dirname(os.path.abspath(a.state)), os.W_OK):
        p.error(f"--state {a.state}: its folder is not writable (or does not exist)")
    if a.properties_file and not os.access(a.properties_file, os.R_OK):
        p.error(f"--properties-file {a.properties_file}: no such readable file")
    for opt in ("param", "storage", "conf"):
        for kv in getattr(a, opt):
            if "=" not in kv:
                p.error(f"--{opt} expects KEY=VALUE, got {kv!r}")
    for kv in a.param:
        key, _, value = kv.partition("=")
        if key.strip() == "fail_on_error" and not isinstance(_value(value), bool):
            p.error(f"--param fail_on_error expects true or false, got {value!r}")
    return a


def _submit_properties_file(path: str) -> dict[str, str]:
    """Make the JVM PySpark starts read ``path``'s settings; returns them. The file is copied
    into a private one (so a pipe such as ``<(...)`` is read once, here). spark-submit reads one
    properties file, the last named: one already in ``$PYSPARK_SUBMIT_ARGS`` (a user's, or a
    parent's private one) is merged into it, ``path``'s settings winning (a later line of a key
    replaces an earlier one), rather than silently replacing it or being replaced by it."""
    earlier, args = take_properties_file(shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")))
    texts = [properties_text(earlier, "$PYSPARK_SUBMIT_ARGS")] if earlier is not None else []
    texts.append(properties_text(path, "--properties-file"))
    merged = joined(*texts)
    named = write_properties({}, prefix=merged)
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", str(named), *args])
    return read_properties(merged)


# Settings configure_spark_with_lance_compact sets on the builder, which would replace the
# properties file's: the file's are handed to it to keep (its jars beside ours, say).
_MERGED_SETTINGS = ("spark.jars", "spark.plugins", "spark.sql.extensions")


def _stop_at_signal(signum: int, frame: Any) -> None:
    """Until the service's own handler: a SIGTERM or SIGINT while the session starts ends the
    process through Python's exit, which removes the private properties files."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    a = parse_args(argv)
    if a.state:  # before Spark starts: a --state that names something else is refused at once
        try:
            read_state(a.state)
        except ValueError as e:
            print(f"maintenance_service: {e}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, _stop_at_signal)
    signal.signal(signal.SIGINT, _stop_at_signal)
    from pyspark.sql import SparkSession

    from .api import configure_spark_with_lance_compact

    builder = SparkSession.builder.appName("lance-compact-maintenance")
    if a.properties_file:  # read by the JVM PySpark starts (configure_spark_with_lance_compact
        # merges it into its own private file when it has storage options to hide)
        try:
            settings = _submit_properties_file(a.properties_file)
        except ValueError as e:
            print(f"maintenance_service: {e}", file=sys.stderr)
            return 2
        for key in _MERGED_SETTINGS:
            if key in settings:
                builder = builder.config(key, settings[key])
    if a.master:
        builder = builder.master(a.master)
    for kv in a.conf:
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    storage = dict(kv.split("=", 1) for kv in a.storage)
    spark = configure_spark_with_lance_compact(builder, warehouse=a.warehouse, catalog=a.catalog,
                                               storage_options=storage or None).getOrCreate()
    params = {k: _value(v) for k, v in (kv.split("=", 1) for kv in a.param)}
    service = Service(spark, a.namespace, params, a.every, a.min_interval, a.backoff, a.max_backoff, a.catalog,
                      a.stop_timeout, a.state)
    signal.signal(signal.SIGTERM, service.on_signal)
    signal.signal(signal.SIGINT, service.on_signal)
    try:
        service.run(a.rounds)
    finally:
        spark.stop()
    return service.exit_status


if __name__ == "__main__":
    raise SystemExit(main())
