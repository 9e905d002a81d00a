package io.github.lancecompact.spark.catalog

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.connector.catalog._
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.read.ScanBuilder
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, RowLevelOperationBuilder, RowLevelOperationInfo, WriteBuilder}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

/** A Lance dataset seen through the catalog: its schema in Spark types, its rows (read on the
 * executors, a partition per group of fragments, all at the version loaded; count(*) is
 * answered from Lance's own count), and nothing written. Metadata tables hang under it ([[MetadataTable]]).
 */
final class LanceTable(ref: TableRef) extends Table with SupportsRead with SupportsWrite
  with SupportsDeleteV2 with SupportsRowLevelOperations {

  private lazy val described = {
    val row = PythonEngine.query("describe", ref.request()).rows().head
    val config = row.getMap(3)
    val props = (0 until config.numElements()).map(i =>
      config.keyArray().getUTF8String(i).toString -> config.valueArray().getUTF8String(i).toString).toMap
    (StructType.fromDDL(row.getUTF8String(0).toString), row.getLong(1), row.getLong(2), props)
  }

  override def name(): String = ref.name
  override def schema(): StructType = described._1
  override def capabilities(): util.Set[TableCapability] =
    util.EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE)
  /** SHOW TBLPROPERTIES: the Lance table's config (its maintenance settings among them),
   * with its location, provider and version. */
  override def properties(): util.Map[String, String] =
    (described._4 ++ Map("location" -> ref.location, "provider" -> "lance", "version" -> described._3.toString)).asJava

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    new LanceScanBuilder(ref.copy(version = Some(ref.version.getOrElse(described._3))), schema())

  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder = ReadOnly.refuse(ref.name, "insert into")
  override def canDeleteWhere(predicates: Array[Predicate]): Boolean = ReadOnly.refuse(ref.name, "delete from")
  override def deleteWhere(predicates: Array[Predicate]): Unit = ReadOnly.refuse(ref.name, "delete from")
  override def newRowLevelOperationBuilder(info: RowLevelOperationInfo): RowLevelOperationBuilder =
    ReadOnly.refuse(ref.name, "update, delete from or merge into")
}
