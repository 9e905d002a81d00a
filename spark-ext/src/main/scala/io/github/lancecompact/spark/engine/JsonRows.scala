package io.github.lancecompact.spark.engine

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.{ArrayBasedMapData, GenericArrayData}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** The engine's JSON rows (arrays of values in schema order) as Spark's internal rows. The
 * engine writes them by Spark type (python/lance_compact/json_rows.py); the types it produces are
 * python/lance_compact/spark_types.py's, each read through here by tests/test_catalog_reads.py. */
object JsonRows {
  private val mapper = new ObjectMapper()

  def row(values: JsonNode, schema: StructType): InternalRow =
    InternalRow.fromSeq(schema.fields.indices.map(i => value(values.get(i), schema.fields(i).dataType)))

  def value(v: JsonNode, t: DataType): Any =
    if (v == null || v.isNull) null
    else t match {
      case LongType | TimestampType | TimestampNTZType => v.asLong()
      case IntegerType | DateType => v.asInt()
      case ShortType => v.asInt().toShort
      case ByteType => v.asInt().toByte
      case DoubleType => v.asDouble()
      case FloatType => v.asDouble().toFloat
      case BinaryType => java.util.Base64.getDecoder.decode(v.asText())
      case d: DecimalType => org.apache.spark.sql.types.Decimal(new java.math.BigDecimal(v.asText()), d.precision, d.scale)
      case BooleanType => v.asBoolean()
      case StringType => UTF8String.fromString(v.asText())
      case ArrayType(e, _) => new GenericArrayData(v.elements().asScala.map(value(_, e)).toArray)
      case s: StructType => row(v, s)
      case MapType(k, e, _) =>
        val entries = v.properties().asScala.toSeq
        ArrayBasedMapData(entries.map(x => value(mapper.getNodeFactory.textNode(x.getKey), k)).toArray,
          entries.map(x => value(x.getValue, e)).toArray)
      case other => throw new IllegalStateException(s"engine result type $other is not supported")
    }
}
