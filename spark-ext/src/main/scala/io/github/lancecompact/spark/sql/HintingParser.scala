package io.github.lancecompact.spark.sql

import java.lang.reflect.Method

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.parser.{ParseException, ParserInterface}
import org.apache.spark.sql.catalyst.trees.Origin

/** Spark's SQL parser, unchanged but for statements people type by habit from Delta, Iceberg or
 * lance-spark (`OPTIMIZE`, `VACUUM`, `DESCRIBE HISTORY`): where Spark fails to parse one (or, for
 * `DESCRIBE HISTORY t`, reads it as a column of a table named HISTORY), the syntax error names
 * our statement ([[HabitHints]]): `[PARSE_SYNTAX_ERROR] Syntax error at or near 'OPTIMIZE':
 * OPTIMIZE is Delta's ...; ... CALL lance.compact(...)`. A [[ParserProxy]]; the error stays a
 * ParseException, the one exception the parser declares. */
object HintingParser {
  def apply(delegate: ParserInterface): ParserInterface = ParserProxy { (method, args) =>
    val result = try ParserProxy.call(delegate, method, args)
    catch {
      case p: ParseException if statementParse(method) =>
        throw text(args).flatMap(HabitHints.hint).flatMap(hinted(p, _)).getOrElse(p)
    }
    if (statementParse(method)) text(args).filter(describesHistory(_, result)).flatMap(HabitHints.hint)
      .foreach { h =>
        val sample = try { delegate.parsePlan("HISTORY"); None } catch { case p: ParseException => Some(p) }
        sample.flatMap(hinted(_, h, Some("'HISTORY'"))).foreach(throw _)
      }
    result
  }

  private def statementParse(m: Method): Boolean = m.getName.startsWith("parsePlan") || m.getName == "parseQuery"

  private def text(args: Array[AnyRef]): Option[String] = args.headOption.collect { case s: String => s }

  private val History = """(?is)^\s*DESC(?:RIBE)?\s+HISTORY\s+\S.*""".r

  /** A `DESCRIBE HISTORY t` that Spark read as a column of a table named HISTORY. */
  private def describesHistory(sql: String, plan: AnyRef): Boolean =
    History.matches(sql) && plan.toString.toLowerCase(java.util.Locale.ROOT).contains("[history]")

  /** Spark 4.0's `stop` (later versions have none): read by name. */
  private def stop(p: ParseException): AnyRef =
    scala.util.Try(p.getClass.getMethod("stop").invoke(p)).getOrElse(p.start)

  /** `original` as a PARSE_SYNTAX_ERROR whose hint is `hint`: built with whichever constructor the
   * running Spark has (4.0 takes a start and a stop, 4.1+ a start), None if none fits. */
  private def hinted(original: ParseException, hint: String, at: Option[String] = None): Option[ParseException] = {
    val error = at.orElse(Option(original.getMessageParameters).flatMap(m => Option(m.get("error"))))
      .getOrElse("the statement")
    val params = Map("error" -> error, "hint" -> s": $hint")
    val ctors = classOf[ParseException].getConstructors.toSeq
    def build(types: Seq[Class[_]], args: Seq[AnyRef]): Option[ParseException] =
      ctors.find(_.getParameterTypes.toSeq == types).flatMap(c =>
        scala.util.Try(c.newInstance(args: _*).asInstanceOf[ParseException]).toOption)
    build(Seq(classOf[Option[_]], classOf[Origin], classOf[String], classOf[Map[_, _]]),
      Seq(original.command, original.start, "PARSE_SYNTAX_ERROR", params))
      .orElse(build(Seq(classOf[Option[_]], classOf[Origin], classOf[Origin], classOf[String], classOf[Map[_, _]]),
        Seq(original.command, original.start, stop(original), "PARSE_SYNTAX_ERROR", params)))
  }
}
