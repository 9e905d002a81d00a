package io.github.lancecompact.spark

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/** For a Thrift or Connect server shared by SQL users who must not reach the driver itself:
 * `spark.sql.extensions=io.github.lancecompact.spark.SharedServerGuard` (the operator's static
 * configuration). It refuses, at analysis, what in plain Spark SQL hands a user the driver's JVM
 * and files, whatever catalog is asked:
 *
 *  - `reflect`, `java_method`, `try_reflect` (any static Java method: `System.getProperty` reads
 *    every setting spark-submit made a system property, the operator's storage keys among them;
 *    `System.getenv` the environment's);
 *  - Hive functions and `CREATE [TEMPORARY] FUNCTION` (a Hive UDF class runs on the driver; Hive's
 *    own `reflect` is one);
 *  - files read through a data source (`CREATE TEMPORARY VIEW v USING text OPTIONS (path ...)`,
 *    ``SELECT * FROM text.`/path` ``, any file format): they read any file the server can, its
 *    properties file with the keys among them.
 *
 * Catalog tables (the `lance` catalog's and any other catalog's) are read as before. Found by the
 * attack pass of issue 33: each of these returned the operator's secret key to a beeline user
 * (tests/test_untrusted_sql.py).
 */
final class SharedServerGuard extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectCheckRule(_ => SharedServerGuard.check)
}

object SharedServerGuard {
  /** Expression classes that call into the JVM by name. */
  private val Reflection = Set("CallMethodViaReflection", "TryReflect")
  /** Plan nodes that create functions from classes. */
  private val FunctionCreation = Set("CreateFunctionCommand", "CreateFunction", "CreateUserDefinedFunction")
  /** Plan nodes and relations that read files a user names. */
  private val FileReads = Set("HadoopFsRelation", "FileTable", "FileScan")
  private val FileProviders = Set("text", "csv", "json", "parquet", "orc", "avro", "binaryfile", "xml",
    "hive", "libsvm", "image")

  private def simple(o: AnyRef): String = o.getClass.getSimpleName.stripSuffix("$")

  private def refuse(what: String): Nothing = throw new UnsupportedOperationException(
    s"$what is refused on this server (io.github.lancecompact.spark.SharedServerGuard): it would reach the " +
      "driver's JVM or its files. Read tables through their catalog.")

  private def fileProvider(provider: String): Boolean = {
    val p = provider.toLowerCase
    FileProviders.contains(p) || p.endsWith("fileformat") ||
      FileProviders.exists(f => p.endsWith(s".$f") || p.contains(s".$f.")) // e.g. ...datasources.v2.csv.CSVDataSourceV2
  }

  val check: LogicalPlan => Unit = plan => plan.foreach { node =>
    val name = simple(node)
    if (FunctionCreation.contains(name)) refuse("creating a function")
    if (name == "CreateTempViewUsing" || name == "CreateTable" || name == "CreateTableV2") {
      providerOf(node).filter(fileProvider).foreach(p => refuse(s"a data source reading files ($p)"))
    }
    node match {
      case r: org.apache.spark.sql.execution.datasources.LogicalRelation
        if FileReads.contains(simple(r.relation)) => refuse("reading files through a data source")
      case _ =>
    }
    if (node.getClass.getName.contains("DataSourceV2Relation")) {
      node.productIterator.collectFirst { case t: AnyRef if FileReads.contains(simple(t)) || simple(t).endsWith("FileTable") => t }
        .foreach(_ => refuse("reading files through a data source"))
    }
    node.expressions.foreach(_.foreach { e =>
      val n = simple(e)
      if (Reflection.contains(n)) refuse("calling Java methods by reflection (reflect, java_method, try_reflect)")
      if (n.startsWith("Hive") && (n.endsWith("UDF") || n.endsWith("UDAF") || n.endsWith("UDTF") ||
        n.endsWith("Function"))) refuse("a Hive function")
    })
  }

  /** The `provider` of a CREATE ... USING plan node, read by name (the classes differ by version). */
  private def providerOf(node: LogicalPlan): Option[String] =
    node.getClass.getMethods.find(m => m.getName == "provider" && m.getParameterCount == 0)
      .flatMap(m => scala.util.Try(m.invoke(node)).toOption).flatMap {
        case s: String => Some(s)
        case Some(s: String) => Some(s)
        case _ => None
      }
}
