package io.github.lancecompact.spark

import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSessionExtensions

import io.github.lancecompact.spark.guard.{GuardCheck, GuardParser, GuardPolicy, HiveSessions, RefusedFunctions}

/** For a Thrift or Connect server shared by SQL users who must not reach the driver itself:
 * `spark.sql.extensions=io.github.lancecompact.spark.SharedServerGuard` (the operator's static
 * configuration). Deny by default: a SQL user reads and writes tables of the operator's catalogs
 * (and temporary views over them) and uses only the data sources, functions and commands the
 * operator allows (guard/GuardPolicy.scala: `spark.lance.compact.guard.allowSources`,
 * `allowFunctions`, `allowCommands`; by default no data source, Spark's reviewed built-in
 * functions, the commands that read, describe and write tables). Anything else is refused by
 * name before it runs, with the setting that would allow it:
 *
 *  - before Spark parses a statement (guard/GuardParser.scala): `${env:...}` and `${system:...}`
 *    references (Spark's variable substitution reads the server's environment and system
 *    properties), and every statement while the session's settings hold a catalog's key or a
 *    redaction setting that is not the operator's (a JDBC connection string sets them without SET);
 *  - a Thrift server's sessions opened without Hive's `${env:...}`/`${system:...}` substitution
 *    of the connection string's settings (guard/HiveSessions.scala);
 *  - built-in functions not allowed (reflection, class loading, a later Spark's new ones) at name
 *    resolution (guard/RefusedFunctions.scala);
 *  - in the analyzed plan (guard/GuardCheck.scala): commands and code-running operations not
 *    allowed, relations and created tables by data source (`USING jdbc`, file formats, `hive`,
 *    streaming), catalogs a session would define, user-defined and Hive functions, `SET` of a
 *    catalog's keys or redaction, a location of the statement's choosing, global temporary views.
 *
 * Found by the attack passes of issues 33 and 41 (tests/test_untrusted_sql.py,
 * tests/test_guard_allowlist.py): each of these had returned the operator's secret key to a
 * beeline user, or written where the user said.
 */
final class SharedServerGuard extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    RefusedFunctions.install(GuardPolicy.ofDriver())
    // now, while the first session is made: a Thrift server makes its Hive configuration next
    if (org.apache.spark.SparkEnv.get != null) HiveSessions.harden(SparkContext.getOrCreate().hadoopConfiguration)
    extensions.injectParser((session, delegate) =>
      GuardParser(session, GuardPolicy.from(session.sparkContext.getConf), delegate))
    extensions.injectCheckRule(session => new GuardCheck(GuardPolicy.from(session.sparkContext.getConf)))
  }
}

object SharedServerGuard {
  /** The names of the registered built-in functions this driver's policy refuses (for tests and
   * the docs' list). */
  def refusedFunctions(): java.util.List[String] = {
    import scala.jdk.CollectionConverters._
    RefusedFunctions.refused(GuardPolicy.ofDriver()).asJava
  }

  /** Spark's built-in functions put back as Spark registered them, for a JVM that goes on
   * without the guard (a test process whose next session is not guarded). */
  def restoreFunctions(): Unit = RefusedFunctions.restore()
}
