package io.github.lancecompact.spark.ui

import org.apache.spark.scheduler.SparkListenerEvent

/** What the product posts to Spark's listener bus for the Lance tab: the live tab's listener
 * reads them as they come, and Spark's event log keeps them (as JSON, by class name) for the
 * history server's tab ([[LanceUiListener]]). Flat fields only (Spark's JSON reader makes them
 * back); rows travel as JSON text. Nothing here holds a storage option or a request: the
 * statement's tag is Spark's own job tag, never shown on a page. */

/** A procedure's statement began: `id` numbers it in this application. */
final case class LanceStatementStarted(id: Long, tag: String, procedure: String, table: String,
                                       user: String, startedAt: Long, budgetMs: Long) extends SparkListenerEvent

/** What the statement is doing now (the engine's words). */
final case class LanceStatementStep(id: Long, step: String, at: Long) extends SparkListenerEvent

/** The statement ended: `outcome` succeeded, failed or cancelled; `rowsJson` its result rows
 * (`{"columns": [...], "rows": [[...], ...]}`), `error` its message (redacted). */
final case class LanceStatementEnded(id: Long, endedAt: Long, outcome: String, error: String,
                                     rowsJson: String) extends SparkListenerEvent

/** `system.table_health` was evaluated: its rows (same JSON shape), at `at`. */
final case class LanceHealthEvaluated(catalog: String, at: Long, rowsJson: String) extends SparkListenerEvent

/** `describe_layout` described a table: its row (same JSON shape), at `at`. */
final case class LanceLayoutDescribed(catalog: String, table: String, at: Long, rowsJson: String) extends SparkListenerEvent

/** What the engine measured for statement `id` as it worked (python/lance_compact/runtime/
 * figures.py), JSON `{"kind": ...}`: `progress` (`bytes_read`, `bytes_written` so far), `cost`
 * (one maintenance version's cost as kept with the table: `table`, `version`, `step`,
 * `bytes_read`, `bytes_written`, `task_ms`, `elapsed_ms`, the same figures
 * `system.maintenance_history` reads back), `layout` (a table's fragments by live rows before or
 * after a maintenance: `table` and a describe_layout-shaped row). `catalog`: the statement's. */
final case class LanceEngineFigures(id: Long, catalog: String, json: String, at: Long) extends SparkListenerEvent
