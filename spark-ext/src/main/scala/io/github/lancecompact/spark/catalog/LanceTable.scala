package io.github.lancecompact.spark.catalog

import java.util

import org.apache.spark.sql.connector.catalog.{Table, TableCapability}
import org.apache.spark.sql.types.StructType

/** A Lance dataset seen through the catalog: named and located, for maintenance
 * procedures. Reading its rows through the catalog is not offered yet.
 */
final class LanceTable(tableName: String, location: String) extends Table {
  override def name(): String = tableName
  override def schema(): StructType = new StructType()
  override def capabilities(): util.Set[TableCapability] = util.Collections.emptySet()
  override def properties(): util.Map[String, String] =
    util.Map.of("location", location, "provider", "lance")
}
