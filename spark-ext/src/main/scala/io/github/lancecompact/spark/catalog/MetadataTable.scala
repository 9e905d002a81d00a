package io.github.lancecompact.spark.catalog

import java.util

import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder, SupportsPushDownRequiredColumns}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

/** `lance.db.t.fragments`, `lance.db.t.versions`, `lance.db.t.indices`: what Lance's manifests
 * say of the table, as read-only tables. The `fragments` table (a row per fragment) is read with
 * only the columns a query names (`count(*)`: none): its schema is asked for alone, then the
 * pruned scan; the others are read whole, once. */
final class MetadataTable(ref: TableRef, kind: String) extends Table with SupportsRead {
  private val pruned = kind == "fragments"
  private lazy val result = PythonEngine.query("metadata", ref.request(_.put("kind", kind)))
  private lazy val described =
    if (pruned) PythonEngine.query("metadata", ref.request { r => r.put("kind", kind); r.put("schema_only", true) })
    else result
  override def name(): String = s"${ref.name}.$kind"
  override def schema(): StructType = described.readSchema()
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    if (!pruned) new ScanBuilder { override def build(): Scan = result }
    else new ScanBuilder with SupportsPushDownRequiredColumns {
      private var required: StructType = schema()
      override def pruneColumns(requiredSchema: StructType): Unit = required = requiredSchema
      override def build(): Scan = PythonEngine.query("metadata", ref.request { r =>
        r.put("kind", kind)
        val columns = r.putArray("columns")
        required.fieldNames.foreach(c => columns.add(c))
      })
    }
}

object MetadataTable {
  val Kinds: Set[String] = Set("fragments", "versions", "indices")
}
