package io.github.lancecompact.spark.guard

import java.util.Locale

import org.apache.spark.SparkConf

/** What a SQL user of a server with [[io.github.lancecompact.spark.SharedServerGuard]] may use:
 * the data sources, functions and commands the operator allows, nothing that nobody forbade.
 * Read once from the driver's static configuration (a session's `SET` moves none of it):
 *
 *  - `spark.lance.compact.guard.allowSources`: data sources a statement may name (`USING x`, a
 *    table of the session catalog made with `x`, a relation read by format): none by default,
 *    since every source Spark registers opens a path (file formats, `hive`, state stores), a
 *    connection (`jdbc`, `socket`), a class, or is a streaming source or sink;
 *  - `spark.lance.compact.guard.allowFunctions`: functions beyond Spark's reviewed built-ins
 *    (`guard/functions.txt`); also user-defined functions by name (a Python, Scala or Hive UDF
 *    the operator registered);
 *  - `spark.lance.compact.guard.allowCommands`: commands and plan operations beyond
 *    [[GuardPolicy.DefaultCommands]], by the plan node's class name (e.g. `AddJarsCommand`,
 *    `MapInPandas`).
 *
 * Entries are comma-separated and compared without regard to letter case. Catalogs: a statement
 * reaches only the catalogs of the static configuration (`spark.sql.catalog.<name>`) and Spark's
 * session catalog.
 */
final case class GuardPolicy(
    sources: Set[String],
    functions: Set[String],
    commands: Set[String],
    operatorCatalogs: Set[String],
    staticConf: Map[String, String]) {

  def allowsSource(names: Iterable[String]): Boolean = names.exists { n =>
    val s = GuardPolicy.norm(n)
    sources.contains(s) || GuardPolicy.ReadThrough.get(s).exists(_.exists(sources.contains))
  }
  def allowsFunction(name: String): Boolean = functions.contains(GuardPolicy.norm(name))
  def allowsCommand(name: String): Boolean = commands.contains(GuardPolicy.norm(name))
  def isOperatorCatalog(name: String): Boolean = operatorCatalogs.contains(GuardPolicy.norm(name))
}

object GuardPolicy {
  val SourcesKey = "spark.lance.compact.guard.allowSources"
  val FunctionsKey = "spark.lance.compact.guard.allowFunctions"
  val CommandsKey = "spark.lance.compact.guard.allowCommands"
  val SessionCatalog = "spark_catalog"
  /** Spark's own catalog of built-in functions and session variables. */
  val SystemCatalog = "system"

  /** Sources Spark reads through for an allowed one: csv, json and xml infer their schemas by
   * reading the files as text (the same files; text reveals nothing csv would not). */
  private val ReadThrough: Map[String, Set[String]] = Map("text" -> Set("csv", "json", "xml"))

  private[guard] def norm(s: String): String = s.trim.toLowerCase(Locale.ROOT)

  /** Spark's built-in functions a SQL user may call by default (the reviewed list in the jar). */
  lazy val DefaultFunctions: Set[String] = {
    val in = getClass.getResourceAsStream("/io/github/lancecompact/spark/guard/functions.txt")
    require(in != null, "guard/functions.txt is missing from the jar")
    try scala.io.Source.fromInputStream(in, "UTF-8").getLines().map(_.trim)
      .filter(l => l.nonEmpty && !l.startsWith("#")).map(norm).toSet
    finally in.close()
  }

  /** Commands a SQL user may run by default: reading, describing and listing; session state
   * (settings, variables, the current namespace, caches, temporary views, cursors, scripts);
   * and reading and writing tables and namespaces of the operator's catalogs (creating one is
   * further checked: no location or path of the statement's choosing, and in the session catalog
   * only an allowed data source). Left out, so refused: adding jars, files and archives, loading
   * data, writing to a directory, setting a location or a SerDe, creating or dropping functions,
   * saving to a data source by format, pipelines' flows and streaming tables, metric views,
   * external commands, and every command a later Spark adds. */
  val DefaultCommands: Set[String] = Set(
    // read, describe, list, explain
    "DescribeColumn", "DescribeFunction", "DescribeNamespace", "DescribeRelation", "DescribeTablePartition",
    "DescribeColumnCommand", "DescribeDatabaseCommand", "DescribeFunctionCommand", "DescribeProcedureCommand",
    "DescribeQueryCommand", "DescribeRelationJsonCommand", "DescribeTableCommand",
    "ShowColumns", "ShowCreateTable", "ShowFunctions", "ShowPartitions", "ShowTablePartition",
    "ShowTableProperties", "ShowTables", "ShowTablesExtended", "ShowViews", "ShowCatalogsCommand",
    "ShowCollationsCommand", "ShowColumnsCommand", "ShowCreateTableAsSerdeCommand", "ShowCreateTableCommand",
    "ShowCurrentNamespaceCommand", "ShowFunctionsCommand", "ShowNamespacesCommand", "ShowPartitionsCommand",
    "ShowProceduresCommand", "ShowTablePropertiesCommand", "ShowTablesCommand", "ShowViewsCommand",
    "ExplainCommand", "StreamingExplainCommand", "ListFilesCommand", "ListJarsCommand", "ListArchivesCommand",
    "NoopCommand",
    // the session's own state
    "SetCommand", "ResetCommand", "SetCatalogAndNamespace", "SetCatalogCommand", "SetNamespaceCommand",
    "SetPathCommand", "CreateVariable", "DropVariable", "SetVariable", "CacheTable", "CacheTableAsSelect",
    "UncacheTable", "ClearCacheCommand", "RefreshTable", "RefreshTableCommand", "RefreshFunction",
    "RefreshFunctionCommand", "RefreshResource", "CreateView", "CreateViewCommand", "CreateTempViewUsing",
    "DropView", "DropTempViewCommand", "AlterViewAs", "AlterViewAsCommand", "AlterViewSchemaBinding",
    "AlterViewSchemaBindingCommand", "SetViewProperties", "UnsetViewProperties", "CompoundBody",
    "DeclareCursor", "OpenCursor", "FetchCursor", "CloseCursor",
    // tables and namespaces of the operator's catalogs
    "AppendData", "OverwriteByExpression", "OverwritePartitionsDynamic", "ReplaceData", "WriteDelta",
    "DeleteFromTable", "DeleteFromTableWithFilters", "UpdateTable", "MergeIntoTable", "InsertOnlyMerge",
    "CreateNamespace", "DropNamespace", "CreateTable", "CreateTableAsSelect", "ReplaceTable",
    "ReplaceTableAsSelect", "CreateTableLike", "DropTable", "AddColumns", "AlterColumns", "DropColumns",
    "RenameColumn", "ReplaceColumns", "RenameTable", "SetTableProperties", "UnsetTableProperties",
    "AlterTableClusterBy", "AlterTableCollation", "CommentOnNamespace", "CommentOnTable",
    "SetNamespaceProperties", "AddCheckConstraint", "AddConstraint", "DropConstraint", "CreateIndex",
    "DropIndex", "TruncateTable", "AddPartitions", "DropPartitions", "RenamePartitions", "TruncatePartition",
    "RecoverPartitions", "RepairTable", "AnalyzeTable", "AnalyzeTables", "AnalyzeColumn",
    // the same through the session catalog's own (v1) commands
    "CreateDataSourceTableCommand", "CreateDataSourceTableAsSelectCommand", "CreateTableCommand",
    "CreateHiveTableAsSelectCommand", "CreateTableLikeCommand", "CreateDatabaseCommand", "DropDatabaseCommand",
    "DropTableCommand", "AlterDatabasePropertiesCommand", "AlterTableAddColumnsCommand",
    "AlterTableAddPartitionCommand", "AlterTableChangeColumnCommand", "AlterTableDropPartitionCommand",
    "AlterTableRenameCommand", "AlterTableRenamePartitionCommand", "AlterTableSetPropertiesCommand",
    "AlterTableUnsetPropertiesCommand", "TruncateTableCommand", "RepairTableCommand", "AnalyzeColumnCommand",
    "AnalyzePartitionCommand", "AnalyzeTableCommand", "AnalyzeTablesCommand", "UnsetNamespacePropertiesCommand",
    "SetNamespaceCollationCommand", "InsertIntoHadoopFsRelationCommand", "InsertIntoDataSourceCommand",
    "InsertIntoHiveTable", "SaveAsV1TableCommand"
  ).map(norm)

  /** The policy of the driver's static configuration `conf`. */
  def from(conf: SparkConf): GuardPolicy = {
    val all = conf.getAll.toMap
    def listed(key: String): Set[String] =
      all.get(key).toSeq.flatMap(_.split(",")).map(norm).filter(_.nonEmpty).toSet
    val catalogs = all.keys.collect {
      case k if k.startsWith("spark.sql.catalog.") && !k.stripPrefix("spark.sql.catalog.").contains(".") =>
        norm(k.stripPrefix("spark.sql.catalog."))
    }.toSet + SessionCatalog + SystemCatalog
    GuardPolicy(listed(SourcesKey), DefaultFunctions ++ listed(FunctionsKey), DefaultCommands ++ listed(CommandsKey),
      catalogs, all)
  }

  /** The policy of the running driver: its SparkEnv's configuration (the SparkContext exists
   * when a session applies its extensions), else the JVM's system properties (spark-submit's). */
  def ofDriver(): GuardPolicy = from(Option(org.apache.spark.SparkEnv.get).map(_.conf).getOrElse(new SparkConf()))
}
