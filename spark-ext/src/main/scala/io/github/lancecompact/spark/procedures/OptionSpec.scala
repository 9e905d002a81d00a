package io.github.lancecompact.spark.procedures

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.sql.types._

/** One compaction option from the engine's parameters.json (packaged into this jar), so
 * names, types and docs of the CALL parameters live in one place with the engine's checks.
 * `aliases` are its former names: still CALL parameters for one release, passed to the engine
 * under the name given, which maps them (options.py).
 */
final case class OptionSpec(name: String, kind: String, doc: String, sql: Boolean, lanceDefault: Option[String],
                            setting: Boolean, aliases: Seq[String] = Nil) {
  /** What applies when the parameter is left out. */
  def defaultText: String =
    if (setting) "none"
    else s"the table's lance.compaction.$name, else ${lanceDefault.getOrElse("none")}"

  def dataType: DataType = kind match {
    case "long" => LongType
    case "double" => DoubleType
    case "boolean" => BooleanType
    case "map" => MapType(StringType, StringType)  // create_index's options (CompactionArguments binds it by name)
    case _ => StringType
  }
}

object OptionSpec {
  private val Resource = "/lance_compact/parameters.json"

  /** parameters.json, read once. */
  private lazy val root = {
    val in = Option(getClass.getResourceAsStream(Resource)).getOrElse(
      throw new IllegalStateException(s"$Resource is missing from the lance-spark-compact jar"))
    try new ObjectMapper().readTree(in) finally in.close()
  }

  private def section(name: String, setting: Boolean): Seq[OptionSpec] =
    root.get(name).elements().asScala.map { o =>
      OptionSpec(o.get("name").asText, o.get("type").asText, o.get("doc").asText,
        Option(o.get("sql")).exists(_.asBoolean),
        Option(o.get("lance_default")).filterNot(_.isNull).map(_.asText), setting,
        Option(o.get("aliases")).map(_.elements().asScala.map(_.asText).toSeq).getOrElse(Nil))
    }.toSeq

  lazy val all: Seq[OptionSpec] =
    section("options", setting = false) ++ section("settings", setting = true) ++
      section("run_settings", setting = true)

  /** The cleanup procedure's parameters (after `table`). */
  lazy val cleanupParameters: Seq[OptionSpec] = section("cleanup_parameters", setting = true)

  /** The optimize_indices procedure's parameters (after `table`). */
  lazy val optimizeIndicesParameters: Seq[OptionSpec] = section("optimize_indices_parameters", setting = true)

  /** The drop_index procedure's parameters (after `table`). */
  lazy val dropIndexParameters: Seq[OptionSpec] = section("drop_index_parameters", setting = true)

  /** The create_index procedure's parameters (after `table`). */
  lazy val createIndexParameters: Seq[OptionSpec] = section("create_index_parameters", setting = true)

  /** describe_layout's own parameters (after table and the two options it takes). */
  lazy val layoutParameters: Seq[OptionSpec] = section("layout_parameters", setting = true)

  /** The maintain procedure's parameters (after `table`). */
  lazy val maintainParameters: Seq[OptionSpec] = section("maintain_parameters", setting = true)

  /** The maintain_warehouse procedure's parameters (after `namespace`). */
  lazy val maintainWarehouseParameters: Seq[OptionSpec] = section("maintain_warehouse_parameters", setting = true)

  /** A result's columns (a `*_columns` section, as the engine answers them) as a schema. */
  def columns(section: String): StructType = StructType.fromDDL(columnsDdl(section))

  /** A `*_columns` section's DDL, as the engine writes it (options.py `columns_ddl`). */
  def columnsDdl(section: String): String =
    root.get(section).elements().asScala.map(c => s"`${c.get("name").asText}` ${c.get("type").asText}").mkString(", ")

  /** Every result's columns (the `*_columns` sections) as the engine writes their DDL. */
  def resultDdls: Seq[String] =
    root.fieldNames().asScala.filter(_.endsWith("_columns")).map(columnsDdl).toSeq

  /** Parameters that take a duration ("duration") or a duration or a moment ("age"), by name:
   * they take Spark's INTERVAL types (and, for "age", TIMESTAMP and TIMESTAMP_NTZ) besides text,
   * which [[CompactionArguments]] turns into the text the engine parses (runtime/durations.py). */
  lazy val temporal: Map[String, String] =
    (all ++ cleanupParameters ++ optimizeIndicesParameters ++ layoutParameters ++ maintainParameters ++
      maintainWarehouseParameters).filter(o => o.kind == "duration" || o.kind == "age")
      .flatMap(o => (o.name +: o.aliases).map(_ -> o.kind)).toMap

  /** The options and settings that are also named CALL parameters, in declaration order. */
  lazy val sqlParameters: Seq[OptionSpec] = all.filter(_.sql)
}
