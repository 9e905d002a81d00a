package io.github.lancecompact.spark.catalog

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.connector.catalog._
import org.apache.spark.sql.connector.catalog.index.{SupportsIndex, TableIndex}
import org.apache.spark.sql.connector.expressions.{ClusterByTransform, Expressions, NamedReference, Transform}
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
final class LanceTable(ref: TableRef, owner: Option[(LanceCatalog, Identifier)] = None) extends Table
  with SupportsRead with SupportsWrite with SupportsDeleteV2 with SupportsRowLevelOperations with SupportsIndex {

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

  /** DESCRIBE TABLE EXTENDED shows "# Clustering Information" from a ClusterByTransform here
   * (Spark's DescribeTableExec reads `partitioning`): the columns of `lance_compact.cluster_by`. */
  override def partitioning(): Array[Transform] =
    described._4.get(LanceTable.ClusterByKey).map(LanceTable.clusterColumns).filter(_.nonEmpty)
      .map(cols => Array[Transform](ClusterByTransform(cols.map(c => Expressions.column("`" + c.replace("`", "``") + "`")))))
      .getOrElse(Array.empty)

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    new LanceScanBuilder(ref.copy(version = Some(ref.version.getOrElse(described._3))), schema())

  /** CREATE INDEX, DROP INDEX and listing ([[TableIndexes]]): a table the catalog loaded by name. */
  private lazy val indexes: TableIndexes = owner.map { case (catalog, ident) => new TableIndexes(catalog, ident, ref) }
    .getOrElse(throw new UnsupportedOperationException(s"table ${ref.name}: indices are created and dropped on the catalog's table by name"))

  override def createIndex(indexName: String, columns: Array[NamedReference],
                           columnsProperties: util.Map[NamedReference, util.Map[String, String]],
                           properties: util.Map[String, String]): Unit =
    indexes.create(indexName, columns, columnsProperties, properties)
  override def dropIndex(indexName: String): Unit = indexes.drop(indexName)
  override def indexExists(indexName: String): Boolean = indexes.exists(indexName)
  override def listIndexes(): Array[TableIndex] = indexes.list()

  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder = ReadOnly.refuse(ref.name, "insert into")
  override def canDeleteWhere(predicates: Array[Predicate]): Boolean = ReadOnly.refuse(ref.name, "delete from")
  override def deleteWhere(predicates: Array[Predicate]): Unit = ReadOnly.refuse(ref.name, "delete from")
  override def newRowLevelOperationBuilder(info: RowLevelOperationInfo): RowLevelOperationBuilder =
    ReadOnly.refuse(ref.name, "update, delete from or merge into")
}

object LanceTable {
  val ClusterByKey = "lance_compact.cluster_by"

  /** The column names of a stored sort order (`zorder(a, b)`, `hilbert(a, b)` or `a DESC NULLS LAST, b`),
   * back-quotes undone; the engine checked the text when it was set. */
  def clusterColumns(order: String): Seq[String] = {
    val z = "(?is)^\\s*(?:zorder|hilbert)\\s*\\((.*)\\)\\s*$".r
    val body = order match { case z(inner) => inner; case other => other }
    val parts = scala.collection.mutable.ArrayBuffer(new StringBuilder)
    var quoted = false
    body.foreach { ch =>
      if (ch == '`') quoted = !quoted
      if (ch == ',' && !quoted) parts += new StringBuilder else parts.last.append(ch)
    }
    parts.toSeq.map(_.toString.trim).filter(_.nonEmpty).map { p =>
      if (p.startsWith("`")) {
        val name = new StringBuilder
        var i = 1
        while (i < p.length && !(p(i) == '`' && !(i + 1 < p.length && p(i + 1) == '`'))) {
          name.append(p(i)); i += (if (p(i) == '`') 2 else 1)
        }
        name.toString
      } else p.split("\\s+").head
    }
  }
}
