package io.github.lancecompact.spark.catalog

import java.util

import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

/** `lance.db.t.fragments`, `lance.db.t.versions`, `lance.db.t.indices`: what Lance's manifests
 * say of the table, as read-only tables. */
final class MetadataTable(ref: TableRef, kind: String) extends Table with SupportsRead {
  private lazy val result = PythonEngine.query("metadata", ref.request(_.put("kind", kind)))
  override def name(): String = s"${ref.name}.$kind"
  override def schema(): StructType = result.readSchema()
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = new ScanBuilder {
    override def build(): Scan = result
  }
}

object MetadataTable {
  val Kinds: Set[String] = Set("fragments", "versions", "indices")
}
