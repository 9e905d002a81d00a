package io.github.lancecompact.spark.catalog

import org.apache.spark.sql.connector.expressions.{Literal, NamedReference}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.types._

/** Spark's V2 predicates as Lance filter SQL, for the ones that translate exactly
 * (comparisons, IN, IS [NOT] NULL, AND, OR, NOT over plain columns and literals). */
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
      case "AND" => both(c, "AND")
      case "OR" => both(c, "OR")
      case "NOT" if c.length == 1 => c(0) match {
        case q: Predicate => sql(q).map(x => s"NOT ($x)")
        case _ => None
      }
      case _ => None
    }
  }

  private def both(c: Array[org.apache.spark.sql.connector.expressions.Expression], op: String) =
    (c(0), c(1)) match {
      case (a: Predicate, b: Predicate) => for (x <- sql(a); y <- sql(b)) yield s"($x) $op ($y)"
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
    case _ => None
  }
}
