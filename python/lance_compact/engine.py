"""The driver's long-lived engine process: ``python -m lance_compact.engine``.

Started once per SparkContext by the JVM (``EngineProcess.scala``), it connects back over
Py4J with the port and secret in its environment, wraps the driver's SparkContext in a
PySpark one, and serves every procedure call: ``compact`` (plan, Spark jobs that rewrite on
executors, commits), ``plan``, ``layout``, ``cleanup``. pylance is imported once, and a
call costs no Spark job of its own beyond the rewrite.

Requests are long-polled from the JVM; each is served on its own thread (so a Thrift
server's concurrent statements run side by side), under its caller's job group and tags.
Responses are JSON: ``{"ok": true, "schema": DDL, "rows": [[...]]}`` or ``{"ok": false,
"error": message}``. Nothing here logs a request: it holds storage credentials.
"""
from __future__ import annotations

import json
import importlib
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

log = logging.getLogger("lance_compact.engine")


def _on_first_use(module: str, function: str) -> Callable[[str], tuple[str, list[tuple]]]:
    """A handler whose module is imported when it is first called, not at engine start."""
    def handle_request(request: str) -> tuple[str, list[tuple]]:
        return getattr(importlib.import_module(f".{module}", __package__), function)(request)
    return handle_request


def _handlers(sc: Any) -> dict[str, Callable[[str], tuple[str, list[tuple]]]]:
    from . import orchestrate
    from .version_cleanup import cleanup_row
    from .layout import layout_result
    from .options import columns_ddl, result_columns
    from .spark_job import SparkBatchRunner
    from .warehouse import warehouse_rows
    from . import metadata_tables, table_reads
    from .indices import optimize_indices_row
    from .table_maintenance import maintain_rows

    runner = SparkBatchRunner(sc)
    return {
        "compact": lambda r: (columns_ddl(result_columns()), [orchestrate.compact(r, runner)]),
        "plan": lambda r: (columns_ddl(result_columns("plan_columns")), orchestrate.dry_run(r)),
        "layout": layout_result,  # the layout row, or the histogram's lines
        "cleanup": lambda r: (columns_ddl(result_columns("cleanup_columns")), [cleanup_row(r)]),
        "warehouse": lambda r: ("`name` STRING, `kind` STRING", warehouse_rows(r)),
        "describe": table_reads.describe,
        "read": table_reads.read,
        # imported on first use: lance.namespace alone takes about 1 s to import cold, and
        # neither is on a CALL's path
        "read_plan": _on_first_use("read_source", "read_plan"),
        "namespace": _on_first_use("namespaces", "namespace_rows"),
        "metadata": metadata_tables.metadata_table,
        "maintain": lambda r: (columns_ddl(result_columns("maintain_columns")), maintain_rows(r, runner)),
        "optimize_indices": lambda r: (columns_ddl(result_columns("optimize_indices_columns")),
                                       [optimize_indices_row(r)]),
        # imported on first use, like the namespace handlers: no CALL but its own needs it
        "maintain_warehouse": lambda r: (columns_ddl(result_columns("maintain_warehouse_columns")), importlib.import_module(
            ".warehouse_maintenance", __package__).maintain_warehouse_on_spark(r, sc)),
        "table_health": _on_first_use("system_tables", "table_health_rows"),
        "maintenance_history": _on_first_use("system_tables", "maintenance_history_rows"),
        "alter_properties": _on_first_use("table_properties", "alter_properties"),
    }


def handle(handlers: dict[str, Callable[[str], tuple[str, list[tuple]]]], action: str,
           request: str) -> dict[str, Any]:
    """Serve one request; errors become ``{"ok": false, "error": ...}``."""
    from .errors import CompactionError
    from .secrets import redact

    try:
        storage = json.loads(request).get("storage_options")
    except (ValueError, AttributeError):
        storage = None
    from .secrets import remember
    remember(storage)
    try:
        if action not in handlers:
            raise CompactionError(f"engine: unknown action {action!r}")
        schema, rows = handlers[action](request)
        return {"ok": True, "schema": schema, "rows": [list(r) for r in rows]}
    except CompactionError as e:
        return {"ok": False, "error": redact(e.message, storage)}
    except Exception as e:  # a bug or an unexpected Lance error: say what, keep serving
        from .failures import describe

        log.error("engine: %s failed: %s", action, redact(traceback.format_exc(), storage))
        return {"ok": False, "error": redact(
            f"lance_compact engine: {action} failed: {type(e).__name__}: {describe(e)}", storage)}


def _exit_with_parent() -> None:
    """The JVM holds our stdin: when it ends (or dies), so do we."""
    try:
        while sys.stdin.buffer.read(1 << 16):
            pass
    finally:
        os._exit(0)


def _exit_when_orphaned() -> None:
    """Also end when the JVM that started us is gone (we were re-parented): a child process
    that inherited our stdin's write end would otherwise keep us alive after a SIGKILL."""
    parent = os.getppid()
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(0)


def _preload() -> None:
    # Overlaps the imports a first call needs with connecting to the JVM.
    import lance  # noqa: F401
    from . import orchestrate, layout, version_cleanup, spark_job  # noqa: F401


def _start_workers(sc: Any) -> None:
    # While this process finishes starting and plans, the executors start their Python workers.
    try:
        from .spark_job import start_workers
        clock = time.monotonic()
        start_workers(sc)
        log.info("Python workers started in %d ms", (time.monotonic() - clock) * 1000)
    except Exception as e:  # only a head start: a compaction starts its workers anyway
        log.warning("starting Python workers ahead of time failed: %s", e)


def _heartbeat(bridge: Any) -> None:
    """Tell the JVM this process is alive, every few seconds: a caller waiting for an answer
    takes a silent engine as hung (``spark.lance.compact.engine.heartbeatTimeout``)."""
    interval = bridge.heartbeatIntervalMs() / 1000
    while True:
        try:
            bridge.heartbeat()
        except Exception as e:  # the JVM is going away; stdin's end stops this process
            log.warning("heartbeat failed: %s", e)
        time.sleep(interval)


def _read_driver_settings(sc: Any) -> None:
    """Once, at start: what the operator configured (the SparkContext's static conf: registered
    strategies, the picture folder) and whether this engine was started for tests (its
    environment). No SQL statement can change either afterwards."""
    from . import driver_conf, secrets
    from .options import hooks_enabled

    conf = sc.getConf().getAll()
    secrets.install_log_redaction()
    secrets.remember({k.rsplit(".", 1)[-1]: v for k, v in conf if ".storage." in k})
    driver_conf.load(conf)
    if hooks_enabled():
        log.warning("test hooks are enabled ($LANCE_COMPACT_TEST_HOOKS=1): for tests only")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    preload = threading.Thread(target=_preload, daemon=True)
    preload.start()

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()  # PYSPARK_GATEWAY_PORT/SECRET from the JVM
    bridge = gateway.entry_point
    jsc = bridge.javaSparkContext()
    sc = SparkContext(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=jsc.sc().conf()))
    _read_driver_settings(sc)
    threading.Thread(target=_start_workers, args=(sc,), daemon=True).start()
    preload.join()
    handlers = _handlers(sc)
    bridge.ready()
    threading.Thread(target=_heartbeat, args=(bridge,), daemon=True, name="heartbeat").start()
    log.info("engine ready (pid %d)", os.getpid())

    def serve(raw: str) -> None:
        from .cancellation import serving

        started = time.monotonic()
        message = json.loads(raw)
        try:
            bridge.adopt(message["id"])
            with serving(lambda: bridge.cancelled(message["id"])):
                text = json.dumps(handle(handlers, message["action"], message["request"]))
        except Exception as e:  # the caller must always get an answer
            text = json.dumps({"ok": False, "error": f"lance_compact engine: {type(e).__name__}: {e}"})
        finally:
            bridge.adopt("")  # clear the caller's job group and tags from this thread
        bridge.respond(message["id"], text)
        log.info("served %s in %d ms", message["action"], (time.monotonic() - started) * 1000)

    while True:
        raw = bridge.nextRequest(60_000)
        if raw is not None:
            threading.Thread(target=serve, args=(raw,), daemon=True).start()


if __name__ == "__main__":
    main()
