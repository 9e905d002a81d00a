package io.github.lancecompact.spark.ui

import scala.annotation.meta.getter

import org.apache.spark.util.kvstore.KVIndex

/** What the Lance tab shows, as kept in the application's status store (the live UI's, or the
 * one the history server rebuilds from the event log): written by [[LanceUiListener]] only,
 * read by the pages. Flat fields, so the history server's disk store can keep them too. */

/** One procedure's statement: `endedAt` 0 and `outcome` "running" while it runs. `bytesRead`,
 * `bytesWritten`: what the engine said it read and wrote so far (-1: it said nothing);
 * `costsJson`: the maintenance versions it committed with their cost, as kept with the table
 * (a JSON array of the engine's `cost` figures). */
final case class LanceStatementRecord(@(KVIndex @getter) id: Long, procedure: String, table: String, user: String,
                                      startedAt: Long, endedAt: Long, step: String, outcome: String,
                                      error: String, rowsJson: String, budgetMs: Long,
                                      tasksDone: Int, tasksAll: Int, taskMs: Long,
                                      bytesRead: Long = -1L, bytesWritten: Long = -1L, costsJson: String = "")

/** A table's row of the last `system.table_health` evaluation that included it (`key`:
 * catalog.namespace.table; `rowJson`: the row as a JSON object by column name; `score` its
 * health score, -1 for none; `line`: its Warehouse page row, made once as it is written, so a
 * page of a thousand tables parses and builds nothing). */
final case class LanceTableHealthRecord(@(KVIndex @getter) key: String, catalog: String, evaluatedAt: Long,
                                        rowJson: String, score: Int, line: String)

/** A table's layout as `describe_layout` returned it, at `at` (`key`: catalog.table@at). */
final case class LanceLayoutRecord(@(KVIndex @getter) key: String, catalog: String, table: String, at: Long,
                                   rowJson: String)
