package io.github.lancecompact.spark.catalog

import java.util

import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.read.ScanBuilder
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.{EngineRequest, PythonEngine}
import io.github.lancecompact.spark.procedures.OptionSpec
import io.github.lancecompact.spark.ui.LanceUiPublish

/** `lance.system.table_health` and `lance.system.maintenance_history`: a row per table (per
 * version of each table) of the whole warehouse, computed by the engine from each table's
 * metadata (python/lance_compact/catalog/system_tables.py). The catalog lists the tables, as
 * `(namespace, table, location)`; the engine evaluates them side by side when the query is
 * planned (the schema is parameters.json's, so DESCRIBE costs nothing). The query's filters
 * on `namespace`, `table` and (history) `version` are pushed down ([[SystemTableScanBuilder]]),
 * so the engine opens only the tables (and decodes only the versions) asked for.
 */
final class SystemTable(catalogName: String, kind: String, tables: Option[Set[String]] => Listed,
                        storage: Map[String, String], maintainSettings: Map[String, String],
                        warehouse: Option[String] = None) extends Table with SupportsRead {
  /** The engine's answer for these pushed filters (none: every listed table); `namespaces`,
   * the pushed namespace filter's values: only those namespaces are listed. */
  private[catalog] def scan(filters: Option[com.fasterxml.jackson.databind.JsonNode],
                            namespaces: Option[Set[String]] = None) = {
    val listed = tables(namespaces)
    val scan = PythonEngine.query(kind, EngineRequest(storage = storage, catalog = Some(catalogName),
      maintainSettings = maintainSettings, warehouse = warehouse,
      tables = listed.tables.map { case (ns, t, l) => (ns.mkString("."), t, l) }) { r =>
      filters.foreach(f => r.set[com.fasterxml.jackson.databind.JsonNode]("filters", f))
      r.put("listed_namespaces", listed.listings)  // the engine logs it
    })
    // the Lance tab's Warehouse page shows the last evaluation of each table, never a listing of its own
    if (kind == "table_health") LanceUiPublish.healthEvaluated(catalogName, scan.readSchema(), scan.rows().toSeq)
    scan
  }
  override def name(): String = s"$catalogName.${SystemTable.Namespace}.$kind"
  override def schema(): StructType = OptionSpec.columns(SystemTable.Columns(kind))
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    new SystemTableScanBuilder(this, versions = kind == "maintenance_history")
}

object SystemTable {
  val Namespace = "system"
  /** These two names under `system` are the system tables, even when the warehouse has a
   * namespace `system` (its other tables stay reachable as `lance.system.<t>`). */
  val Columns: Map[String, String] = Map("table_health" -> "health_columns", "maintenance_history" -> "history_columns")
  val Kinds: Set[String] = Columns.keySet
}
