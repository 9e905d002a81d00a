package io.github.lancecompact.spark.catalog

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.analysis.{IndexAlreadyExistsException, NoSuchIndexException}
import org.apache.spark.sql.catalyst.util.{ArrayBasedMapData, ArrayData}
import org.apache.spark.sql.connector.catalog.Identifier
import org.apache.spark.sql.connector.catalog.index.{SupportsIndex, TableIndex}
import org.apache.spark.sql.connector.expressions.{Expressions, NamedReference}
import org.apache.spark.sql.types.{ArrayType, DataType, TimestampType}
import org.apache.spark.unsafe.types.UTF8String

import io.github.lancecompact.spark.engine.{LanceCompactException, PythonEngine}
import io.github.lancecompact.spark.procedures.EngineProcedure

/** A catalog table's indices as Spark's `SupportsIndex` asks for them ([[LanceTable]]):
 *
 *  - `CREATE INDEX [IF NOT EXISTS] name ON lance.db.t USING <type> (column) OPTIONS (k = v, ...)`
 *    is `CALL lance.create_index(table => 'db.t', column, index_type => <type>, name, metric,
 *    replace, options => map(k, v, ...))`, through the procedure itself ([[EngineProcedure.call]]):
 *    the same checks, engine request, job descriptions, progress, cancel and metrics. OPTIONS
 *    `metric` and `replace` are those parameters; every other key is an entry of `options`
 *    (checked by the engine, as a CALL's are). A column's own OPTIONS (`(emb OPTIONS (k = v))`)
 *    join the statement's.
 *  - `DROP INDEX [IF EXISTS] name ON lance.db.t` is `CALL lance.drop_index(table => 'db.t', name)`.
 *  - Spark's IF NOT EXISTS / IF EXISTS catch the exceptions it defines for them: an index of that
 *    name exists ([[IndexAlreadyExistsException]], unless `replace = true`) or does not
 *    ([[NoSuchIndexException]], naming the table's indices); both are checked here before the
 *    engine is asked, and the engine checks again when it commits: when it refuses because
 *    another statement created or dropped that index meanwhile, the same exception is thrown.
 *  - listing: the `indices` metadata table's rows, as Spark's `TableIndex`.
 *
 * `ident` is how the statement named the table in `catalog`; `ref` where it is.
 */
final class TableIndexes(catalog: LanceCatalog, ident: Identifier, ref: TableRef) {
  private val reserved = Set("table", "column", "index_type", "name", "dry_run", "options")

  /** The table as a procedure's `table` argument: `db.t`, each part quoted when it must be, and
   * prefixed with the catalog's name when the namespace starts with it (resolveTable drops it). */
  private val tableArgument: String = {
    val parts = (ident.namespace.toSeq :+ ident.name).map { p =>
      if (p.matches("[A-Za-z_][A-Za-z0-9_]*")) p else "`" + p.replace("`", "``") + "`"
    }
    if (ident.namespace.headOption.exists(_.equalsIgnoreCase(catalog.name()))) (catalog.name() +: parts).mkString(".")
    else parts.mkString(".")
  }

  /** A new index's name: no control or other unprintable character before anything logs it (the
   * engine checks the rest of its rule: python/lance_compact/runtime/identifiers.py). */
  private def checkName(name: String): Unit = Names.checkText(catalog.name(), "index name", name)

  /** The `indices` metadata table's rows (python/lance_compact/catalog/metadata_tables.py):
   * per index, column name -> (type, value or null). */
  private def rows(): Seq[Map[String, (DataType, Any)]] = {
    val scan = PythonEngine.query("metadata", ref.request(_.put("kind", "indices")))
    val schema = scan.readSchema()
    scan.rows().toSeq.map(r => schema.fields.zipWithIndex.map { case (f, i) =>
      f.name -> (f.dataType, if (r.isNullAt(i)) null else r.get(i, f.dataType))
    }.toMap)
  }

  private def names(): Seq[String] = rows().map(_("name")._2.toString).sorted

  def exists(name: String): Boolean = LanceCompactException.userErrors { names().contains(name) }

  def create(name: String, columns: Array[NamedReference],
             columnProperties: util.Map[NamedReference, util.Map[String, String]],
             properties: util.Map[String, String]): Unit = LanceCompactException.userErrors {
    checkName(name)
    val statement = s"CREATE INDEX $name ON ${ref.name}"
    if (columns.length != 1) throw new IllegalArgumentException(
      s"table ${ref.name}: $statement names ${columns.length} columns (${columns.map(_.toString).mkString(", ")}); " +
        s"a Lance index covers one column: CREATE INDEX $name ON ${ref.name} USING <type> (column)")
    // the statement's OPTIONS, USING's type among them (SupportsIndex.PROP_TYPE), and the column's own
    val stated = Option(properties).map(_.asScala.toSeq).getOrElse(Nil) ++
      Option(columnProperties).flatMap(m => Option(m.get(columns.head))).map(_.asScala.toSeq).getOrElse(Nil)
    stated.groupBy(_._1.toLowerCase).collectFirst { case (k, vs) if vs.size > 1 => k }.foreach { k =>
      throw new IllegalArgumentException(s"table ${ref.name}: $statement: option $k is given twice")
    }
    val byKey = stated.map { case (k, v) => k.toLowerCase -> v }.toMap
    val indexType = byKey.get(SupportsIndex.PROP_TYPE).filter(t => t != null && t.trim.nonEmpty).getOrElse(
      throw new IllegalArgumentException(s"table ${ref.name}: $statement needs the index's type: " +
        s"CREATE INDEX $name ON ${ref.name} USING BTREE (column), or IVF_PQ, BITMAP, ..."))
    reserved.intersect(byKey.keySet).headOption.foreach { k =>
      val why = if (k == "dry_run") s"CREATE INDEX builds; CALL lance.create_index(table => '$tableArgument', ..., dry_run => true) shows the plan"
        else "the statement gives it (CREATE INDEX <name> ON <table> USING <type> (<column>))"
      throw new IllegalArgumentException(s"table ${ref.name}: $statement: OPTIONS may not hold $k: $why")
    }
    val replace = byKey.get("replace").map(_.trim.toLowerCase).map {
      case "true" => true
      case "false" => false
      case other => throw new IllegalArgumentException(
        s"table ${ref.name}: $statement: OPTIONS replace expects true or false, got '${Names.show(other)}'")
    }.getOrElse(false)
    if (!replace && exists(name)) throw new IndexAlreadyExistsException(name, ref.name, None)
    val options = stated.filterNot { case (k, _) =>
      Set(SupportsIndex.PROP_TYPE, "metric", "replace").contains(k.toLowerCase)
    }
    val args = Map[String, Any](
      "table" -> UTF8String.fromString(tableArgument),
      "column" -> UTF8String.fromString(TableIndexes.columnText(columns.head)),
      "index_type" -> UTF8String.fromString(indexType.trim),
      "name" -> UTF8String.fromString(name),
      "replace" -> java.lang.Boolean.valueOf(replace)) ++
      byKey.get("metric").map(m => "metric" -> UTF8String.fromString(m)) ++
      Option.when(options.nonEmpty)("options" -> ArrayBasedMapData(
        options.map(o => UTF8String.fromString(o._1): Any).toArray,
        options.map(o => (if (o._2 == null) null else UTF8String.fromString(o._2)): Any).toArray))
    try EngineProcedure.call(catalog, "create_index", args)
    catch {
      // another statement made an index of that name meanwhile: Spark's IF NOT EXISTS applies to it too
      case e: LanceCompactException if !replace && e.getMessage.contains("already exists") && exists(name) =>
        throw new IndexAlreadyExistsException(name, ref.name, Some(e))
    }
  }

  def drop(name: String): Unit = LanceCompactException.userErrors {
    // an existing index's exact name, whatever pylance let it be, but never a control character
    Names.checkControl(catalog.name(), "index name", name)
    val known = names()
    // Lance's own system indices (`__lance_frag_reuse`, ...) are not listed: the engine says what they are
    if (!known.contains(name) && !name.startsWith("__")) throw new NoSuchIndexException(Names.show(name),
      s"${ref.name}; its indices are: ${if (known.isEmpty) "none" else known.map(Names.show).mkString(", ")}", None)
    try EngineProcedure.call(catalog, "drop_index",
      Map("table" -> UTF8String.fromString(tableArgument), "name" -> UTF8String.fromString(name)))
    catch {
      // another statement dropped it meanwhile: Spark's IF EXISTS applies to that too
      case e: LanceCompactException if e.getMessage.contains("no index named") && !exists(name) =>
        throw new NoSuchIndexException(name, ref.name, Some(e))
    }
  }

  /** Each index: its name, type and column, and as properties what the `indices` metadata table
   * says of it (segments, fragments covered of all, unindexed rows, metric, created_at, ...). */
  def list(): Array[TableIndex] = LanceCompactException.userErrors {
    rows().map { r =>
      val columns = r("columns")._2 match {
        case a: ArrayData => (0 until a.numElements()).map(i =>
          Expressions.column("`" + a.getUTF8String(i).toString.replace("`", "``") + "`")).toArray
        case _ => Array.empty[NamedReference]
      }
      val properties = new util.Properties()
      r.foreach { case (k, (t, v)) =>
        if (v != null && !Set("name", "type", "columns").contains(k)) properties.setProperty(k, TableIndexes.text(t, v))
      }
      new TableIndex(r("name")._2.toString, r("type")._2.toString, columns,
        new util.HashMap[NamedReference, util.Properties](), properties)
    }.toArray
  }
}

object TableIndexes {
  /** A column reference as the engine's `column` argument: its field path, dotted, a part
   * holding a dot or back-quote quoted with back-quotes. */
  def columnText(column: NamedReference): String = column.fieldNames().map { p =>
    if (p.contains(".") || p.contains("`")) "`" + p.replace("`", "``") + "`" else p
  }.mkString(".")

  /** A metadata table's value as a property's text: a timestamp as an ISO instant, a list
   * comma-separated. */
  private def text(t: DataType, v: Any): String = (t, v) match {
    case (TimestampType, us: Long) =>
      java.time.Instant.ofEpochSecond(Math.floorDiv(us, 1000000L), Math.floorMod(us, 1000000L) * 1000).toString
    case (ArrayType(e, _), a: ArrayData) => a.toSeq[Any](e).mkString(",")
    case (_, other) => other.toString
  }
}
