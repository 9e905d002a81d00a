package io.github.lancecompact.spark.guard

import scala.collection.concurrent.TrieMap

import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.analysis.{FunctionRegistry, TableFunctionRegistry}
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo}

/** Every function Spark registers for all sessions (its built-in registries, shared by every
 * session of the JVM) that the policy does not allow, replaced there by one that refuses when a
 * statement names it: the refusal comes at name resolution, for SQL and the DataFrame API alike,
 * before the function is built; the name stays listed (`SHOW FUNCTIONS`) and described
 * (`DESCRIBE FUNCTION`). Spark 4.2 resolves built-ins from the shared registry itself (a
 * session's extension functions no longer shadow them), hence the shared registry; the guard is
 * the JVM's setting (`spark.sql.extensions` of its static configuration), so every session of
 * the JVM is guarded alike. [[GuardCheck]] refuses the same functions' expression classes again
 * in the analyzed plan. */
object RefusedFunctions {
  /** The built-ins as Spark registered them, before any was replaced (name -> info, builder). */
  private val scalarOriginals = TrieMap[String, (FunctionIdentifier, ExpressionInfo, FunctionRegistry.FunctionBuilder)]()
  private val tableOriginals = TrieMap[String, (FunctionIdentifier, ExpressionInfo, TableFunctionRegistry.TableFunctionBuilder)]()

  private def remember(): Unit = synchronized {
    if (scalarOriginals.isEmpty) FunctionRegistry.builtin.listFunction().foreach { id =>
      for (info <- FunctionRegistry.builtin.lookupFunction(id); b <- FunctionRegistry.builtin.lookupFunctionBuilder(id))
        scalarOriginals(id.funcName) = (id, info, b)
    }
    if (tableOriginals.isEmpty) TableFunctionRegistry.builtin.listFunction().foreach { id =>
      for (info <- TableFunctionRegistry.builtin.lookupFunction(id);
           b <- TableFunctionRegistry.builtin.lookupFunctionBuilder(id))
        tableOriginals(id.funcName) = (id, info, b)
    }
  }

  /** Replaces, in Spark's shared registries, every built-in the policy refuses (and puts back
   * one the policy now allows). */
  def install(policy: GuardPolicy): Unit = synchronized {
    remember()
    scalarOriginals.values.foreach { case (id, info, builder) =>
      FunctionRegistry.builtin.registerFunction(id, info,
        if (policy.allowsFunction(id.funcName)) builder else (_: Seq[Expression]) => throw refusal(id.funcName))
    }
    tableOriginals.values.foreach { case (id, info, builder) =>
      TableFunctionRegistry.builtin.registerFunction(id, info,
        if (policy.allowsFunction(id.funcName)) builder else (_: Seq[Expression]) => throw refusal(id.funcName))
    }
  }

  /** Puts every built-in back as Spark registered it (a JVM that goes on without the guard:
   * a test process). */
  def restore(): Unit = synchronized {
    scalarOriginals.values.foreach { case (id, info, b) => FunctionRegistry.builtin.registerFunction(id, info, b) }
    tableOriginals.values.foreach { case (id, info, b) => TableFunctionRegistry.builtin.registerFunction(id, info, b) }
  }

  /** The registered built-in names (scalar and table functions) the policy refuses. */
  def refused(policy: GuardPolicy): Seq[String] = {
    remember()
    (scalarOriginals.keys ++ tableOriginals.keys).toSeq.distinct.filterNot(policy.allowsFunction).sorted
  }

  /** The expression classes of the refused built-ins that no allowed built-in shares (the plan's
   * second check: an expression of one of these came from a refused function). */
  def refusedClasses(policy: GuardPolicy): Map[String, String] = {
    remember()
    val (allowed, refused) = scalarOriginals.values.toSeq.partition { case (id, _, _) => policy.allowsFunction(id.funcName) }
    val shared = allowed.map(_._2.getClassName).toSet
    refused.filterNot(r => shared.contains(r._2.getClassName))
      .groupBy(_._2.getClassName).map { case (cls, fs) => cls -> fs.map(_._1.funcName).sorted.head }
  }

  def refusal(name: String): UnsupportedOperationException =
    Refusal(s"the function $name", "it is not among the functions the operator allows",
      Some(GuardPolicy.FunctionsKey -> name))
}
