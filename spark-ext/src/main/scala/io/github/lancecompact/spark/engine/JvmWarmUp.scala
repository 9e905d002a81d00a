package io.github.lancecompact.spark.engine

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.QueryPlanningTracker
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser

import io.github.lancecompact.spark.procedures.OptionSpec

/** A fresh driver JVM's first statement pays for code nothing has run yet: Spark's SQL parser
 * builds its ANTLR tables on first use (about 0.3-0.6 s), the engine's result schemas are parsed
 * from DDL, the code generated for result rows is compiled by Janino the first time, and the
 * catalog's and procedures' classes load. [[EnginePlugin]] runs these on a daemon thread while
 * the SparkContext and the session are made (spark-sql's `-e` runs its first statement right
 * after), so the first CALL finds them warm. It reads no table, leases no worker, posts no
 * event and runs no statement; a failure only leaves the first statement as slow as before. */
private[spark] object JvmWarmUp extends Logging {
  /** The shapes of what users run first: the parser's decisions are cached per grammar rule. */
  val Statements: Seq[String] = Seq(
    "CALL lance.compact(table => 'db.events', target_rows_per_fragment => 1048576)",
    "CALL lance.maintain_warehouse(namespace => 'db', older_than => '7 days', dry_run => true)",
    "SELECT * FROM lance.system.table_health WHERE score < 80 ORDER BY score")

  def start(): Unit = {
    val t = new Thread(() => { run(); withSession() }, "lance-compact-jvm-warm-up")
    t.setDaemon(true)
    t.start()
  }

  /** Once the application's session exists (made after the context: spark-sql makes its Hive
   * metastore on the main thread meanwhile), Spark's analyzer on a query that reads nothing:
   * its rules' classes and first runs. Analysis only: nothing executes, no event is posted. */
  private def withSession(): Unit = {
    val deadline = System.nanoTime() + 120L * 1000000000L
    var session = SparkSession.getDefaultSession
    while (session.isEmpty && System.nanoTime() < deadline) {
      Thread.sleep(50)
      session = SparkSession.getDefaultSession
    }
    session.foreach { spark =>
      try {
        val state = spark.sessionState
        state.analyzer.executeAndCheck(state.sqlParser.parsePlan("SELECT 1 AS a, 'b' AS b"), new QueryPlanningTracker)
        Statements.take(1).foreach(state.sqlParser.parsePlan)
      } catch {
        case e: Throwable if NonFatal(e) || e.isInstanceOf[LinkageError] => logDebug("warming the analyzer failed", e)
      }
    }
  }

  private[engine] def run(): Unit = {
    val started = System.nanoTime()
    try {
      Statements.foreach(CatalystSqlParser.parsePlan)
      CatalystSqlParser.parseMultipartIdentifier("db.events")
      // The engine's answers name one of these schemas: parsed once into PythonEngine's cache,
      // and a projection of its rows compiled (the result rows' code is generated the same way).
      OptionSpec.resultDdls.foreach { ddl =>
        val schema = PythonEngine.schemaOf(ddl)
        UnsafeProjection.create(schema)
      }
      Class.forName("io.github.lancecompact.spark.catalog.LanceCatalog")
      Class.forName("io.github.lancecompact.spark.procedures.EngineProcedure")
      logDebug(s"the driver's first-statement code paths warmed in ${(System.nanoTime() - started) / 1000000} ms")
    } catch {
      case e: Throwable if NonFatal(e) || e.isInstanceOf[LinkageError] =>
        logDebug("warming the driver's first-statement code paths failed", e)
    }
  }
}
