package io.github.lancecompact.spark.procedures

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.sql.types._

/** One compaction option from the engine's parameters.json (packaged into this jar), so
 * names, types and docs of the CALL parameters live in one place with the engine's checks.
 */
final case class OptionSpec(name: String, kind: String, doc: String, sql: Boolean, lanceDefault: String) {
  def dataType: DataType = kind match {
    case "long" => LongType
    case "double" => DoubleType
    case "boolean" => BooleanType
    case _ => StringType
  }
}

object OptionSpec {
  private val Resource = "/lance_compact/parameters.json"

  lazy val all: Seq[OptionSpec] = {
    val in = Option(getClass.getResourceAsStream(Resource)).getOrElse(
      throw new IllegalStateException(s"$Resource is missing from the lance-spark-compact jar"))
    val root = try new ObjectMapper().readTree(in) finally in.close()
    root.get("options").elements().asScala.map { o =>
      val default = Option(o.get("lance_default")).filterNot(_.isNull).map(_.asText).getOrElse("none")
      OptionSpec(o.get("name").asText, o.get("type").asText, o.get("doc").asText,
        Option(o.get("sql")).exists(_.asBoolean), default)
    }.toSeq
  }

  /** The options that are also named CALL parameters, in declaration order. */
  lazy val sqlParameters: Seq[OptionSpec] = all.filter(_.sql)
}
