package io.github.lancecompact.spark.catalog

import org.apache.spark.sql.connector.expressions.{Literal, NamedReference}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.types._

/** Spark's V2 predicates as Lance filter SQL, for the ones that translate exactly
 * (comparisons, IN, IS [NOT] NULL, STARTS_WITH / ENDS_WITH / CONTAINS (what LIKE 'ab%' becomes),
 * AND, OR, NOT over plain columns and literals: numbers, booleans, strings, dates, timestamps).
 * Used for pushed filters (Spark checks the rows again) and for the procedures' `where`
 * ([[io.github.lancecompact.spark.procedures.WhereClause]]). */
object LanceFilters {
  private val Plain = "[A-Za-z_][A-Za-z0-9_]*".r

  def sql(p: Predicate): Option[String] = {
    val c = p.children()
    p.name() match {
      case op @ ("=" | "<>" | "<" | "<=" | ">" | ">=") if c.length == 2 =>
        for (l <- operand(c(0)); r <- operand(c(1))) yield s"$l $op $r"
      case "IS_NULL" if c.length == 1 => operand(c(0)).map(x => s"$x IS NULL")
      case "IS_NOT_NULL" if c.length == 1 => operand(c(0)).map(x => s"$x IS NOT NULL")
      case "IN" if c.length >= 2 =>
        val parts = c.toSeq.map(operand)
        if (parts.forall(_.isDefined)) Some(s"${parts.head.get} IN (${parts.tail.map(_.get).mkString(", ")})")
        else None
      case f @ ("STARTS_WITH" | "ENDS_WITH" | "CONTAINS") if c.length == 2 =>
        for (l <- operand(c(0)); r <- operand(c(1))) yield s"${f.toLowerCase}($l, $r)"
      case "ALWAYS_TRUE" => Some("TRUE")
      case "ALWAYS_FALSE" => Some("FALSE")
      case "AND" => both(c, "AND")
      case "OR" => both(c, "OR")
      case "NOT" if c.length == 1 => c(0) match {
        case q: Predicate => sql(q).map(x => s"NOT ($x)")
        case _ => None
      }
      case _ => None
    }
  }

  /** `a AND b`: a chain of one operator unparenthesized (`a OR b OR c`: Lance recurses once per
   * operator and parenthesis, and the engine bounds a filter's tokens), the other one in
   * parentheses. */
  private def both(c: Array[org.apache.spark.sql.connector.expressions.Expression], op: String) =
    (c(0), c(1)) match {
      case (a: Predicate, b: Predicate) =>
        def side(p: Predicate) = sql(p).map(x => if (Set("AND", "OR")(p.name()) && p.name() != op) s"($x)" else x)
        for (x <- side(a); y <- side(b)) yield s"$x $op $y"
      case _ => None
    }

  private def operand(e: org.apache.spark.sql.connector.expressions.Expression): Option[String] = e match {
    case r: NamedReference if r.fieldNames().length == 1 && Plain.matches(r.fieldNames()(0)) =>
      Some(r.fieldNames()(0))
    case l: Literal[_] => literal(l.value(), l.dataType())
    case _ => None
  }

  private def literal(v: Any, t: DataType): Option[String] = (v, t) match {
    case (null, _) => None
    case (_, ByteType | ShortType | IntegerType | LongType) => Some(v.toString)
    case (_, FloatType | DoubleType) if !v.toString.exists(_.isLetter) => Some(v.toString)
    case (_, BooleanType) => Some(v.toString.toUpperCase)
    case (_, StringType) => Some("'" + v.toString.replace("'", "''") + "'")
    // Spark's internal values: days since the epoch; microseconds since the epoch (UTC for
    // TIMESTAMP, wall time for TIMESTAMP_NTZ). An instant compares exactly with a column of any
    // time zone only as a typed value (a TIMESTAMP '...' text is read in the column's zone).
    case (d: Int, DateType) => Some(s"DATE '${java.time.LocalDate.ofEpochDay(d.toLong)}'")
    case (m: Long, TimestampType) => Some(s"""arrow_cast($m, 'Timestamp(Microsecond, Some("UTC"))')""")
    case (m: Long, TimestampNTZType) => Some(s"arrow_cast($m, 'Timestamp(Microsecond, None)')")
    case _ => None
  }
}
