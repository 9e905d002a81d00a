package io.github.lancecompact.spark.procedures

import scala.collection.mutable

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter
import org.apache.spark.sql.types._

import io.github.lancecompact.spark.catalog.LanceCatalog

/** The arguments compaction procedures share, and their binding into the engine's request.
 *
 * Positional order: table, the options marked `sql` in parameters.json, options, strategy.
 * Option values are checked by the engine (one set of rules for SQL and Python); here they
 * are only carried, typed, as Spark bound them.
 */
object CompactionArguments {
  private val mapper = new ObjectMapper()

  val parameters: Array[ProcedureParameter] = (
    ProcedureParameter.in("table", StringType)
      .comment("A table of the catalog (namespace.table) or the path/URI of a Lance dataset in its warehouse").build() +:
      OptionSpec.sqlParameters.map { o =>
        ProcedureParameter.in(o.name, o.dataType).defaultValue("NULL")
          .comment(s"${o.doc} Default: the table's lance.compaction.${o.name}, else ${o.lanceDefault}.").build()
      } :+
      ProcedureParameter.in("options", MapType(StringType, StringType)).defaultValue("NULL")
        .comment("Any compaction option by name, values as text; unknown keys are rejected").build() :+
      ProcedureParameter.in("strategy", StringType).defaultValue("NULL")
        .comment("Planning strategy: default, or a dotted Python class name").build()
    ).toArray

  /** `name TYPE` of every parameter, in positional order, for DESCRIBE PROCEDURE. */
  lazy val signature: String = parameters.map(p => s"${p.name} ${p.dataType.sql}").mkString(", ")

  /** Reject arguments Spark would silently cast into a parameter's type (1.5 into a BIGINT
   * becomes 1; 'abc' fails later without naming the parameter). `input` is what the CALL
   * passed: named arguments carry their name in metadata, positional ones come first.
   */
  def checkTypes(procedure: String, input: StructType): Unit = {
    input.fields.zipWithIndex.foreach { case (field, i) =>
      val byName = field.metadata.contains(ProcedureParameter.BY_NAME_METADATA_KEY)
      val param = if (byName) parameters.find(_.name == field.name) else parameters.lift(i)
      param.foreach { p =>
        val ok = (p.dataType, field.dataType) match {
          case (_, NullType) => true
          case (LongType, t) => integral(t)
          case (DoubleType, t) => integral(t) || t == FloatType || t == DoubleType || t.isInstanceOf[DecimalType]
          case (MapType(StringType, StringType, _), MapType(StringType, v, _)) =>
            !(v.isInstanceOf[ArrayType] || v.isInstanceOf[MapType] || v.isInstanceOf[StructType])
          case (expected, t) => expected == t
        }
        if (!ok) throw new IllegalArgumentException(
          s"$procedure: parameter ${p.name} expects ${describe(p.dataType)}, got a value of type ${field.dataType.sql}")
      }
    }
  }

  private def integral(t: DataType): Boolean =
    t == ByteType || t == ShortType || t == IntegerType || t == LongType

  private def describe(t: DataType): String = t match {
    case LongType => "an integer (BIGINT)"
    case DoubleType => "a number (DOUBLE)"
    case BooleanType => "true or false (BOOLEAN)"
    case StringType => "a string"
    case _: MapType => "map(key, value, ...) with string keys"
    case other => other.sql
  }

  final case class Bound(table: String, uri: String, request: String)

  /** Bind a row (declared order, defaults filled in by Spark) into the engine's request JSON. */
  def bind(catalog: LanceCatalog, row: InternalRow): Bound = {
    if (row.isNullAt(0)) throw new IllegalArgumentException("parameter table is required")
    val table = row.getUTF8String(0).toString
    val uri = catalog.resolveTable(table)

    val request: ObjectNode = mapper.createObjectNode()
    request.put("table", table)
    request.put("uri", uri)
    val params = request.putObject("params")
    OptionSpec.sqlParameters.zipWithIndex.foreach { case (o, i) =>
      val ord = i + 1
      if (!row.isNullAt(ord)) o.dataType match {
        case LongType => params.put(o.name, row.getLong(ord))
        case DoubleType => params.put(o.name, row.getDouble(ord))
        case BooleanType => params.put(o.name, row.getBoolean(ord))
        case _ => params.put(o.name, row.getUTF8String(ord).toString)
      }
    }
    val optionsOrd = OptionSpec.sqlParameters.length + 1
    val options = request.putObject("options")
    if (!row.isNullAt(optionsOrd)) {
      val map = row.getMap(optionsOrd)
      val seen = mutable.Set.empty[String]
      (0 until map.numElements()).foreach { i =>
        val key = map.keyArray().getUTF8String(i).toString
        if (!seen.add(key.toLowerCase)) throw new IllegalArgumentException(s"table $table: option $key is given twice")
        val values = map.valueArray()
        options.put(key, if (values.isNullAt(i)) null else values.getUTF8String(i).toString)
      }
    }
    val strategyOrd = optionsOrd + 1
    if (!row.isNullAt(strategyOrd)) request.put("strategy", row.getUTF8String(strategyOrd).toString)
    val storage = request.putObject("storage_options")
    catalog.storageOptions.foreach { case (k, v) => storage.put(k, v) }
    Bound(table, uri, mapper.writeValueAsString(request))
  }
}
