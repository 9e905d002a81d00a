package io.github.lancecompact.spark.procedures

import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.apache.spark.sql.catalyst.QueryPlanningTracker
import org.apache.spark.sql.catalyst.expressions.{And, CallMethodViaReflection, Expression, Nondeterministic, Not, Or, SubqueryExpression, UserDefinedExpression}
import org.apache.spark.sql.catalyst.optimizer.{BooleanSimplification, ComputeCurrentTime, ConstantFolding, LikeSimplification, OptimizeIn, ReplaceExpressions, RewriteWithExpression, SimplifyCasts, UnwrapCastInBinaryComparison}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LocalRelation, LogicalPlan}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.V2ExpressionBuilder
import org.apache.spark.sql.classic
import org.apache.spark.sql.types.StructType

import io.github.lancecompact.spark.catalog.LanceFilters

/** A procedure's `where`, written in Spark SQL, as Lance's filter: parsed by the session's
 * parser, resolved against the table's columns by its analyzer (its functions, its errors),
 * constants folded once (`current_timestamp() - INTERVAL 1 DAY` becomes one timestamp,
 * `LIKE 'ab%'` a prefix test), then translated by the catalog's pushed-filter translation
 * ([[LanceFilters]]). What has no exact Lance equivalent is refused naming that part in Spark's
 * SQL; nothing a user writes runs code while folding (UDFs, reflection, subqueries and
 * nondeterministic functions are refused first).
 */
object WhereClause {
  // The optimizer's rules that evaluate constants and simplify, applied to the one Filter only
  // (the whole optimizer would drop a Filter over an empty relation).
  private val Folding: Seq[Rule[LogicalPlan]] = Seq(ComputeCurrentTime, ReplaceExpressions, RewriteWithExpression, ConstantFolding,
    OptimizeIn, LikeSimplification, SimplifyCasts, UnwrapCastInBinaryComparison, BooleanSimplification, ConstantFolding)

  private val Supported = "comparisons of a column with a constant, IN, IS [NOT] NULL, LIKE 'prefix%', " +
    "AND, OR, NOT; constants may be expressions such as current_timestamp() - INTERVAL 1 DAY"

  /** The Lance filter for `where` on a table with `schema`; an IllegalArgumentException naming
   * `table` and the part at fault otherwise. */
  def lanceFilter(table: String, schema: StructType, where: String): String = {
    def refuse(why: String): Nothing = throw new IllegalArgumentException(s"table $table: where '$where' $why")
    val session = SparkSession.active match {
      case s: classic.SparkSession => s
      case other => refuse(s"cannot be parsed in a ${other.getClass.getSimpleName}")
    }
    val parsed = try session.sessionState.sqlParser.parseExpression(where) catch {
      case e: AnalysisException => refuse(s"is not a Spark SQL expression: ${e.message}")
    }
    // Spark's analyzer recurses per level: a chain such as id + id + ... (700 levels) overflowed
    // the driver thread's stack. Lance's planner recurses too (the engine bounds a filter's tokens).
    val depth = depthOf(parsed)
    if (depth > MaxDepth) refuse(s"is nested $depth levels deep; at most $MaxDepth are accepted " +
      "(write a long list of values as IN (...), which is one level)")
    val relation = LocalRelation(DataTypeUtils.toAttributes(schema))
    val analyzed = try session.sessionState.analyzer.executeAndCheck(Filter(parsed, relation), new QueryPlanningTracker)
    catch {
      // Spark's own words, without the plan of the one-line query made here
      case e: AnalysisException => refuse(s"cannot be resolved against the table's columns: ${e.message}")
    }
    // Refused before folding evaluates anything: a subquery (named with what holds it), a
    // user-defined function, reflection, a nondeterministic function.
    condition(analyzed).foreach { e =>
      val found = (e +: e.children).collectFirst {
        case _: SubqueryExpression => "a subquery"
        case _: UserDefinedExpression => "a user-defined function"
        case _: CallMethodViaReflection => "a reflection call"
        case _: Nondeterministic => "a nondeterministic function"
      }
      found.foreach(what => refuse(s"has a part Lance's filter cannot express: ${e.sql} ($what); supported: $Supported"))
    }
    val folded = condition(Folding.foldLeft(analyzed)((plan, rule) => rule(plan)))
    translate(folded).getOrElse {
      val part = culprit(folded)
      val columns = if (part.references.exists(a => !a.name.matches("[A-Za-z_][A-Za-z0-9_]*")))
        " (Lance's filter takes columns whose names are letters, digits and underscores)" else ""
      refuse(s"has a part Lance's filter cannot express: ${part.sql}$columns; supported: $Supported")
    }
  }

  /** Levels a where may nest (operators, functions, parentheses). */
  val MaxDepth = 200

  /** The deepest nesting of `e`, counted without recursion. */
  private def depthOf(e: Expression): Int = {
    var deepest = 0
    val stack = scala.collection.mutable.Stack((e, 1))
    while (stack.nonEmpty) {
      val (x, d) = stack.pop()
      deepest = math.max(deepest, d)
      x.children.foreach(c => stack.push((c, d + 1)))
    }
    deepest
  }

  private def condition(plan: LogicalPlan): Expression =
    plan.collectFirst { case f: Filter => f.condition }.getOrElse(
      throw new IllegalStateException(s"no filter left in the analyzed where: $plan"))

  private def translate(e: Expression): Option[String] =
    new V2ExpressionBuilder(e, true).buildPredicate().flatMap(p => LanceFilters.sql(p))

  /** The smallest part that does not translate: down AND, OR and NOT to the first such leaf. */
  private def culprit(e: Expression): Expression = e match {
    case And(l, r) => culprit(if (translate(l).isEmpty) l else r)
    case Or(l, r) => culprit(if (translate(l).isEmpty) l else r)
    case Not(c) if translate(c).isEmpty => culprit(c)
    case other => other
  }
}
