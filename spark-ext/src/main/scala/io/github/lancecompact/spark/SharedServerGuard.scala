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
 *    properties file with the keys among them;
 *  - files written or removed where a user chooses: `INSERT OVERWRITE [LOCAL] DIRECTORY` (it empties
 *    the folder first), `LOAD DATA`, `ADD JAR|FILE|ARCHIVE`, and a `LOCATION` (or `path`) given to
 *    `CREATE DATABASE|NAMESPACE|TABLE` (also `AS SELECT`, `LIKE`, Hive's `STORED AS`) or `ALTER ...
 *    SET LOCATION`: the attack pass found `CREATE DATABASE d LOCATION '<any folder>'` then `DROP
 *    DATABASE d CASCADE` deleting that folder (the operator's warehouse, say), and CTAS and Hive
 *    tables writing into any folder;
 *  - a global temporary view (`CREATE GLOBAL TEMPORARY VIEW`, `createGlobalTempView`): every
 *    session reads it in `global_temp` and may replace it, so one user's view fed another's queries;
 *  - a `SET` that lifts Spark's redaction: of any `*redaction*` key, or of
 *    `spark.sql.legacy.setCommandRejectsSparkCoreConfs` (with it false a session may set core keys
 *    such as `spark.redaction.regex`, and `SET spark.sql.catalog.<c>.storage.aws_access_key_id`
 *    then showed the operator's key id).
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
  /** Plan nodes that write, load or remove files where the user says, or add files to the driver. */
  private val FileWrites = Set("InsertIntoDir", "InsertIntoDataSourceDirCommand", "InsertIntoHiveDirCommand",
    "LoadData", "LoadDataCommand", "AddJarsCommand", "AddFilesCommand", "AddArchivesCommand",
    "SetTableLocation", "AlterTableSetLocationCommand", "SetNamespaceLocation", "AlterDatabaseSetLocationCommand")
  /** Session settings whose change lifts redaction (key in lower case; see the object's doc). */
  private val RejectsCoreConfs = "spark.sql.legacy.setcommandrejectssparkcoreconfs"

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
    if (FileWrites.contains(name)) refuse("writing, loading or adding files where a statement says")
    if (name == "SetCommand") setKey(node).foreach { key =>
      val k = key.toLowerCase(java.util.Locale.ROOT)
      if (k == RejectsCoreConfs || k.contains("redaction")) refuse(s"SET $key (it would lift the redaction of secrets)")
    }
    if (name.startsWith("Create") && node.productIterator.exists {
      case v: AnyRef => simple(v) == "GlobalTempView"
      case _ => false
    } || name == "CreateTempViewUsing" && node.productElementNames.zip(node.productIterator).contains(("global", true))) {
      refuse("a global temporary view (every session could read and replace it)")
    }
    if (name.startsWith("Create") || name.startsWith("Replace")) locationOf(node).foreach { l =>
      refuse(s"a LOCATION or path of a statement's choosing ($l)")
    }
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

  /** The key a `SET key=value` sets (None for `SET`, `SET -v` and `SET key`, which only read). */
  private def setKey(node: LogicalPlan): Option[String] = node.productIterator.collectFirst {
    case Some((key: String, Some(_))) => key
  }

  /** A location a CREATE plan node was given, read by field name and class name (the nodes differ
   * by version and catalog): a `location`/`path` field, a `location`/`path` property, a table spec's
   * or catalog table's location. Hive tables and CREATE TABLE LIKE carry theirs in a storage format. */
  private def locationOf(node: LogicalPlan): Option[String] = {
    def given(v: Any): Option[String] = v match {
      case Some(x) => given(x)
      case s: String if s.nonEmpty => Some(s)
      case u: java.net.URI => Some(u.toString)
      case _ => None
    }
    def inside(v: Any): Option[String] = v match {
      case m: scala.collection.Map[_, _] => m.collectFirst {
        case (k: String, x) if Set("location", "path").contains(k.toLowerCase(java.util.Locale.ROOT)) => given(x)
      }.flatten
      case Some(x) => inside(x)
      case p: Product if Set("CatalogTable", "CatalogStorageFormat", "TableSpec", "UnresolvedTableSpec")
        .contains(simple(p.asInstanceOf[AnyRef])) =>
        p.productElementNames.zip(p.productIterator).collectFirst {
          case ("locationUri" | "location", x) if given(x).isDefined => given(x)
          case ("storage" | "properties" | "options", x) if inside(x).isDefined => inside(x)
        }.flatten
      case _ => None
    }
    node.productElementNames.zip(node.productIterator).collectFirst {
      case ("location" | "path", v) if given(v).isDefined => given(v)
      case (_, v) if inside(v).isDefined => inside(v)
    }.flatten
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
