package io.github.lancecompact.spark.procedures

import java.time.{Instant, LocalDateTime, ZoneId, ZoneOffset}

import scala.collection.mutable

import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._

import io.github.lancecompact.spark.catalog.{LanceCatalog, LanceTable, Names, TableRef}
import io.github.lancecompact.spark.engine.EngineRequest

/** The arguments the procedures share, and their binding into the engine's request.
 *
 * Positional order: table, the options and settings marked `sql` in parameters.json,
 * options, strategy; then the former names (`aliases`) of those parameters, last so that no
 * positional call changes. Values are checked by the engine (one set of rules for SQL and
 * Python); here they are type-checked and carried as Spark bound them.
 */
object CompactionArguments {

  private val table = ProcedureParameter.in("table", StringType)
    .comment("A table of the catalog (namespace.table) or the path/URI of a Lance dataset in its warehouse").build()

  private val named: Seq[ProcedureParameter] = OptionSpec.sqlParameters.map { o =>
    ProcedureParameter.in(o.name, o.dataType).defaultValue("NULL")
      .comment(s"${o.doc} Default: ${o.defaultText}.").build()
  }

  private val options = ProcedureParameter.in("options", MapType(StringType, StringType)).defaultValue("NULL")
    .comment("Any compaction option or strategy setting by name, values as text; unknown keys are rejected").build()

  private val strategy = ProcedureParameter.in("strategy", StringType).defaultValue("NULL")
    .comment("Planning strategy: default, io_bounded, deletion_only, incremental, or the name of one registered " +
      "by whoever configures the catalog (spark.sql.catalog.<catalog>.strategies.<name> = module.Class); " +
      "also Iceberg's binpack (a plain compaction) and sort (a clustering run by sort_order)").build()

  /** The former names of `specs` as parameters of the same type (the engine maps each to its
   * name, and refuses a call that gives both). */
  private def formerNames(specs: Seq[OptionSpec]): Seq[ProcedureParameter] = specs.flatMap { o =>
    o.aliases.map(a => ProcedureParameter.in(a, o.dataType).defaultValue("NULL")
      .comment(s"Deprecated: the former name of ${o.name}, accepted until the next release.").build())
  }

  /** Every parameter of compact and plan_compaction, in positional order. */
  val compaction: Array[ProcedureParameter] =
    (((table +: named) :+ options :+ strategy) ++ formerNames(OptionSpec.sqlParameters)).toArray

  private def after(table: ProcedureParameter, specs: Seq[OptionSpec]): Array[ProcedureParameter] =
    ((table +: specs.map { o =>
      ProcedureParameter.in(o.name, o.dataType).defaultValue("NULL").comment(o.doc).build()
    }) ++ formerNames(specs)).toArray

  /** The parameters of cleanup. */
  val cleanup: Array[ProcedureParameter] = after(table, OptionSpec.cleanupParameters)

  /** The parameters of optimize_indices. */
  val optimizeIndices: Array[ProcedureParameter] = after(table, OptionSpec.optimizeIndicesParameters)

  /** The parameters of drop_index. */
  val dropIndex: Array[ProcedureParameter] = after(table, OptionSpec.dropIndexParameters)

  /** The parameters of create_index (its `options` a map, bound as compact's options map). */
  val createIndex: Array[ProcedureParameter] = after(table, OptionSpec.createIndexParameters)

  /** The parameters of describe_layout: table, the target and threshold its counts use,
   * then histogram, picture and compare_version. */
  val describeLayout: Array[ProcedureParameter] =
    subset("table", "target_rows_per_fragment", "materialize_deletions_threshold") ++
      after(table, OptionSpec.layoutParameters).drop(1)

  /** The parameters of maintain. */
  val maintain: Array[ProcedureParameter] = after(table, OptionSpec.maintainParameters)

  private val namespace = ProcedureParameter.in("namespace", StringType).defaultValue("NULL")
    .comment("A namespace of the catalog (db, or a.b for a nested one): its tables and those of the namespaces under it; default: every table of the warehouse").build()

  /** The parameters of maintain_warehouse. */
  val maintainWarehouse: Array[ProcedureParameter] = after(namespace, OptionSpec.maintainWarehouseParameters)

  /** Some of them, in the same relative order (for procedures that take fewer). */
  def subset(names: String*): Array[ProcedureParameter] = compaction.filter(p => names.contains(p.name))

  /** `name TYPE` of every parameter, in positional order, for DESCRIBE PROCEDURE. */
  def signature(params: Array[ProcedureParameter]): String =
    params.map(p => s"${p.name} ${p.dataType.sql}").mkString(", ")

  /** The parameters a CALL binds: the first one (the table or namespace, which the binders
   * read at position 0) and those the call passes, in positional order. Spark analyses the
   * default of every parameter of a bound procedure on every CALL, each in a run of its own
   * analyzer (ResolveDefaultColumns.analyze, a few ms each): for compact's ~40 parameters that
   * was most of a warm no-op CALL's time. Parameters left out are the ones the engine would
   * get as NULL anyway. Arguments Spark must refuse (an unknown or repeated name, a
   * positional one after a named one, more positional ones than parameters, a name that
   * differs from a parameter's in case only) bind the whole list, so Spark's own error (and
   * its case rules) stay as they were. */
  def given(params: Array[ProcedureParameter], input: StructType): Array[ProcedureParameter] = {
    def byName(f: StructField) = f.metadata.contains(ProcedureParameter.BY_NAME_METADATA_KEY)
    val positional = input.fields.takeWhile(f => !byName(f)).length
    val names = input.fields.drop(positional).map(_.name)
    val index = params.map(_.name).zipWithIndex.toMap
    val wellFormed = positional <= params.length && names.length == input.fields.length - positional &&
      input.fields.drop(positional).forall(byName) && names.distinct.length == names.length &&
      names.forall(n => index.get(n).exists(_ >= positional))
    if (!wellFormed) return params
    val wanted = (0 until math.max(positional, 1)).toSet ++ names.map(index)
    val passed = (input.fields.take(positional).zip(params.map(_.name)).map { case (f, n) => n -> f.dataType } ++
      input.fields.drop(positional).map(f => f.name -> f.dataType)).toMap
    params.zipWithIndex.collect { case (p, i) if wanted(i) => typed(p, passed.get(p.name)) }
  }

  /** A duration or time parameter given as an INTERVAL or TIMESTAMP is bound with that type,
   * so Spark passes the value as it is (no cast to text in the session's format); [[bindRest]]
   * writes it as the engine's text. */
  private def typed(p: ProcedureParameter, given: Option[DataType]): ProcedureParameter = given match {
    case Some(t) if p.dataType == StringType && temporal(p.name, t) =>
      ProcedureParameter.in(p.name, t).defaultValue("NULL").comment(p.comment).build()
    case _ => p
  }

  /** Whether parameter `name` takes a value of type `t` besides text (parameters.json's kinds
   * "duration": the INTERVAL types; "age": those and TIMESTAMP, TIMESTAMP_NTZ). */
  private def temporal(name: String, t: DataType): Boolean = OptionSpec.temporal.get(name).exists { kind =>
    t match {
      case _: DayTimeIntervalType | _: YearMonthIntervalType | CalendarIntervalType => true
      case TimestampType | TimestampNTZType => kind == "age"
      case _ => false
    }
  }

  /** Reject arguments Spark would silently cast into a parameter's type (1.5 into a BIGINT
   * becomes 1; 'abc' fails later without naming the parameter). `input` is what the CALL
   * passed: named arguments carry their name in metadata, positional ones come first.
   */
  def checkTypes(procedure: String, params: Array[ProcedureParameter], input: StructType): Unit = {
    input.fields.zipWithIndex.foreach { case (field, i) =>
      val byName = field.metadata.contains(ProcedureParameter.BY_NAME_METADATA_KEY)
      val param = if (byName) params.find(_.name == field.name) else params.lift(i)
      param.foreach { p =>
        val ok = (p.dataType, field.dataType) match {
          case (_, NullType) => true
          case (StringType, t) if temporal(p.name, t) => true
          case (LongType, t) => integral(t)
          case (DoubleType, t) => integral(t) || t == FloatType || t == DoubleType || t.isInstanceOf[DecimalType]
          case (MapType(StringType, StringType, _), MapType(StringType, v, _)) =>
            !(v.isInstanceOf[ArrayType] || v.isInstanceOf[MapType] || v.isInstanceOf[StructType])
          case (expected, t) => expected == t
        }
        val expected = OptionSpec.temporal.get(p.name) match {
          case Some("age") => "a duration or a moment: an INTERVAL (INTERVAL 7 DAYS), a TIMESTAMP or a string " +
            "('7 days', '7d', '2026-11-20 00:00:00')"
          case Some(_) => "a duration: an INTERVAL (INTERVAL 10 MINUTES) or a string ('10 minutes', '10m')"
          case None => describe(p.dataType)
        }
        if (!ok) throw new IllegalArgumentException(
          s"$procedure: parameter ${p.name} expects $expected, got a value of type ${field.dataType.sql}")
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

  /** An INTERVAL or TIMESTAMP argument as the text the engine's one parser reads
   * (runtime/durations.py): '<n> days|hours|minutes|seconds', '<n> months', an ISO instant. A
   * TIMESTAMP_NTZ is taken in the session's time zone, as Spark casts one to a TIMESTAMP. */
  private def timeText(t: DataType, row: InternalRow, i: Int): String = t match {
    case _: DayTimeIntervalType => micros(row.getLong(i))
    case _: YearMonthIntervalType => s"${row.getInt(i)} months"
    case CalendarIntervalType =>  // its parts that are not zero
      val v = row.getInterval(i)
      Seq(Option.when(v.months != 0)(s"${v.months} months"), Option.when(v.days != 0)(s"${v.days} days"),
        Option.when(v.microseconds != 0)(micros(v.microseconds))).flatten.mkString(" ") match {
        case "" => "0 seconds"
        case text => text
      }
    case TimestampType => instant(row.getLong(i)).toString
    case TimestampNTZType =>
      val us = row.getLong(i)
      LocalDateTime.ofEpochSecond(Math.floorDiv(us, 1000000L), (Math.floorMod(us, 1000000L) * 1000).toInt,
        ZoneOffset.UTC).atZone(ZoneId.of(SQLConf.get.sessionLocalTimeZone)).toInstant.toString
    case other => throw new IllegalArgumentException(s"a value of type ${other.sql} is not a duration or a time")
  }

  private def instant(us: Long): Instant = Instant.ofEpochSecond(Math.floorDiv(us, 1000000L), Math.floorMod(us, 1000000L) * 1000)

  /** Microseconds as the largest whole unit that states them. */
  private def micros(us: Long): String =
    Seq("days" -> 86400000000L, "hours" -> 3600000000L, "minutes" -> 60000000L, "seconds" -> 1000000L)
      .collectFirst { case (unit, size) if us % size == 0 => s"${us / size} $unit" }
      .getOrElse(s"${java.math.BigDecimal.valueOf(us, 6).stripTrailingZeros.toPlainString} seconds")

  /** Bind a row (declared order, defaults filled in by Spark) into the engine's request JSON. */
  def bind(catalog: LanceCatalog, params: Array[ProcedureParameter], row: InternalRow): Bound = {
    if (row.isNullAt(0)) throw new IllegalArgumentException("parameter table is required")
    val tableArg = row.getUTF8String(0).toString
    val (uri, storage) = catalog.resolve(tableArg)

    // `where` is Spark SQL: translated to Lance's filter against the table's schema, read only when given.
    lazy val schema = new LanceTable(TableRef(tableArg, uri, storage, warehouse = catalog.warehouseRoot)).schema()
    def where(text: String) = if (text.trim.isEmpty) text else WhereClause.lanceFilter(tableArg, schema, text)
    Bound(tableArg, uri, bindRest(catalog, tableArg, params, row, Some(tableArg), Some(uri), Nil, where,
      storage)(_ => ()))
  }

  /** Bind maintain_warehouse's row: the namespace's tables (listed by the catalog, the way
   * SHOW TABLES lists them) with their locations, the parameters, the catalog's maintain.*
   * settings. */
  def bindWarehouse(catalog: LanceCatalog, params: Array[ProcedureParameter], row: InternalRow): Bound = {
    val namespace = if (row.isNullAt(0)) None else Some(row.getUTF8String(0).toString)
    val started = System.currentTimeMillis()  // max_duration counts from here, listing included
    val what = namespace.map(n => s"namespace $n").getOrElse("the warehouse")
    val (tables, listings) = catalog.listUnder(namespace)
    Bound(what, "", bindRest(catalog, what, params, row, None, None, tables) { r =>
      namespace.foreach(r.put("namespace", _))
      r.put("listed_namespaces", listings)  // the engine logs it: a namespace's call lists only its folders
      r.put("started_at_ms", started)
    })
  }

  /** The request (EngineRequest's envelope): the table or the warehouse's tables, the bound
   * parameters and options map, the catalog's storage options and maintain.* settings. */
  private def bindRest(catalog: LanceCatalog, tableArg: String, params: Array[ProcedureParameter],
                       row: InternalRow, table: Option[String], uri: Option[String],
                       tables: Seq[(String, String, String)],
                       where: String => String = identity,
                       storage: Map[String, String] = Map.empty)(fill: ObjectNode => Unit): String =
    EngineRequest(table = table, uri = uri, storage = if (uri.isDefined) storage else catalog.storageOptions,
                  catalog = Some(catalog.name()),
                  maintainSettings = catalog.maintainSettings, tables = tables,
                  warehouse = catalog.warehouseRoot) { request =>
    fill(request)
    val values = request.putObject("params")
    val optionMap = request.putObject("options")
    params.zipWithIndex.drop(1).filterNot { case (_, i) => row.isNullAt(i) }.foreach { case (p, i) =>
      p.name match {
        case "options" =>
          val map = row.getMap(i)
          val seen = mutable.Set.empty[String]
          (0 until map.numElements()).foreach { j =>
            val key = map.keyArray().getUTF8String(j).toString
            if (!seen.add(key.toLowerCase)) throw new IllegalArgumentException(s"table $tableArg: option ${Names.show(key)} is given twice")
            val v = map.valueArray()
            optionMap.put(key, if (v.isNullAt(j)) null
              else if (key.equalsIgnoreCase("where")) where(v.getUTF8String(j).toString)
              else v.getUTF8String(j).toString)
          }
        case "strategy" => request.put("strategy", row.getUTF8String(i).toString)
        case "where" => values.put("where", where(row.getUTF8String(i).toString))
        case name => p.dataType match {
          case LongType => values.put(name, row.getLong(i))
          case DoubleType => values.put(name, row.getDouble(i))
          case BooleanType => values.put(name, row.getBoolean(i))
          case StringType => values.put(name, row.getUTF8String(i).toString)
          case t => values.put(name, timeText(t, row, i))
        }
      }
    }
  }
}
