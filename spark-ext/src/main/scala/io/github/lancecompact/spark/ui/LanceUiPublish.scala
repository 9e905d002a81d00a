package io.github.lancecompact.spark.ui

import scala.util.Try

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.{ArrayNode, ObjectNode}
import org.apache.spark.SparkContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.{ArrayData, MapData}
import org.apache.spark.sql.types._

/** Posts the Lance tab's events ([[LanceUiEvents]]) to the application's listener bus: the
 * live tab's listener and the event log (for the history server) both get them. Posting never
 * fails a statement: the tab is a view. Rows go as JSON objects by column name (result columns
 * of parameters.json, whose texts the engine has already redacted).
 */
object LanceUiPublish {
  private val mapper = new ObjectMapper()

  def post(sc: SparkContext, event: org.apache.spark.scheduler.SparkListenerEvent): Unit =
    try org.apache.spark.LanceCompactUiBus.post(sc, event)
    catch { case _: Exception => () }

  /** The active context, if any (no event without one). */
  def context: Option[SparkContext] = org.apache.spark.LanceCompactUiBus.active

  /** Who runs the statement: the calling thread's user (a Thrift server's session user runs as
   * itself), else the application's. */
  def user(sc: SparkContext): String =
    Try(org.apache.hadoop.security.UserGroupInformation.getCurrentUser.getShortUserName).getOrElse(sc.sparkUser)

  /** `rows` of `schema` as a JSON array of objects. */
  def rowsJson(schema: StructType, rows: Seq[InternalRow]): String = {
    val out = mapper.createArrayNode()
    rows.foreach(r => out.add(objectOf(schema, r)))
    out.toString
  }

  private def objectOf(schema: StructType, row: InternalRow): ObjectNode = {
    val o = mapper.createObjectNode()
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      if (row.isNullAt(i)) o.putNull(f.name) else o.set[ObjectNode](f.name, node(row.get(i, f.dataType), f.dataType))
    }
    o
  }

  private def node(v: Any, t: DataType): com.fasterxml.jackson.databind.JsonNode = {
    val f = mapper.getNodeFactory
    (v, t) match {
      case (null, _) => f.nullNode()
      case (x: Long, _) => f.numberNode(x)
      case (x: Int, _) => f.numberNode(x)
      case (x: Short, _) => f.numberNode(x)
      case (x: Byte, _) => f.numberNode(x)
      case (x: Double, _) => f.numberNode(x)
      case (x: Float, _) => f.numberNode(x)
      case (x: Boolean, _) => f.booleanNode(x)
      case (a: ArrayData, ArrayType(e, _)) =>
        val arr: ArrayNode = f.arrayNode()
        (0 until a.numElements()).foreach(i => arr.add(if (a.isNullAt(i)) f.nullNode() else node(a.get(i, e), e)))
        arr
      case (m: MapData, MapType(k, e, _)) =>
        val o = f.objectNode()
        (0 until m.numElements()).foreach { i =>
          val value = m.valueArray()
          o.set[ObjectNode](String.valueOf(m.keyArray().get(i, k)), if (value.isNullAt(i)) f.nullNode() else node(value.get(i, e), e))
        }
        o
      case (r: InternalRow, s: StructType) => objectOf(s, r)
      case (x, _) => f.textNode(String.valueOf(x))
    }
  }

  /** `system.table_health` of `catalog` was evaluated: its rows, now. */
  def healthEvaluated(catalog: String, schema: StructType, rows: Seq[InternalRow]): Unit =
    context.foreach(sc => post(sc, LanceHealthEvaluated(catalog, System.currentTimeMillis(), rowsJson(schema, rows))))

  /** `describe_layout` of `table` answered `rows`. */
  def layoutDescribed(catalog: String, table: String, schema: StructType, rows: Seq[InternalRow]): Unit =
    context.foreach(sc => post(sc, LanceLayoutDescribed(catalog, table, System.currentTimeMillis(), rowsJson(schema, rows))))

  /** Statement `id` ended (`id` 0: it never reached the engine, nothing to say). */
  def statementEnded(id: Long, outcome: String, error: String, schema: StructType, rows: Seq[InternalRow]): Unit =
    if (id > 0) context.foreach(sc => post(sc, LanceStatementEnded(id, System.currentTimeMillis(), outcome,
      Option(error).getOrElse(""), if (schema == null) "" else rowsJson(schema, rows))))
}
