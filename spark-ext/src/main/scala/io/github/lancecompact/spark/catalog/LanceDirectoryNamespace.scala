package io.github.lancecompact.spark.catalog

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.analysis.{NamespaceAlreadyExistsException, NoSuchNamespaceException, NonEmptyNamespaceException}
import org.apache.spark.sql.connector.catalog.Identifier

import io.github.lancecompact.spark.engine.{EngineRequest, LanceCompactException, PythonEngine}

/** A warehouse laid out by a Lance directory namespace, the layout lance-spark's
 * `impl=dir` catalog writes under its `root`, resolved by Lance itself
 * (`lance.namespace.DirectoryNamespace`, in the engine; see `lance_compact/namespaces.py`).
 * With `singleLevel` (lance-spark's `single_level_ns=true`) the tables `<root>/<t>.lance`
 * are in the one virtual namespace `default`; otherwise namespaces and tables are those of
 * the root's `__manifest`. Both catalogs name a table the same: `<catalog>.db.events`.
 */
final class LanceDirectoryNamespace(catalogName: String, root: String, storage: Map[String, String],
                                    singleLevel: Boolean) extends TableDirectory with Logging {
  // Paths given as table arguments, and the locations Lance's manifest gives for tables, are
  // bounded by the root as in our own layout (one boundary: the Warehouse's).
  private val bounds = new Warehouse(catalogName, Some(root))

  override def boundaryRoot: Option[String] = bounds.boundaryRoot

  private def ask(op: String, id: Seq[String]): Seq[(String, String)] = {
    val request = EngineRequest(storage = storage, warehouse = boundaryRoot) { r =>
      // Lance gets the root in normal form, as the boundary checks it
      r.put("op", op).put("root", boundaryRoot.getOrElse(root)).put("single_level", singleLevel)
      val ids = r.putArray("id")
      id.foreach(ids.add)
    }
    PythonEngine.query("namespace", request).rows().toSeq.map { row =>
      (row.getUTF8String(1).toString, if (row.isNullAt(2)) null else row.getUTF8String(2).toString)
    }
  }

  def namespaceExists(namespace: Array[String]): Boolean =
    namespace.isEmpty || ask("namespace_exists", namespace.toSeq).nonEmpty

  def namespaceLocation(namespace: Array[String]): String = root

  def listNamespaces(namespace: Array[String]): Array[Array[String]] = {
    if (!namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    ask("list_namespaces", namespace.toSeq).map(n => namespace :+ n._1).toArray
  }

  def listTables(namespace: Array[String]): Array[Identifier] = {
    if (!namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    ask("list_tables", namespace.toSeq).map(t => Identifier.of(namespace, t._1)).toArray
  }

  def findTable(ident: Identifier): Option[String] =
    ask("table", ident.namespace.toSeq :+ ident.name).headOption.map(_._2).map { location =>
      try bounds.checkPath(location) catch {
        case e: IllegalArgumentException => throw new IllegalArgumentException(
          s"table ${(ident.namespace :+ ident.name).mkString(".")}: ${e.getMessage}", e)
      }
    }

  /** Tables whose location leads out of the root are left out of warehouse-wide listings (noted in the log). */
  override def listedLocation(ident: Identifier): Option[String] =
    try findTable(ident) catch {
      case e: IllegalArgumentException =>
        logWarning(s"catalog $catalogName: leaving table ${Names.show((ident.namespace :+ ident.name).mkString("."))} " +
          s"out of listings: ${Names.show(e.getMessage)}")
        None
    }

  def createNamespace(namespace: Array[String]): Unit = {
    if (namespace.isEmpty || namespaceExists(namespace)) throw new NamespaceAlreadyExistsException(namespace)
    ask("create_namespace", namespace.toSeq)
  }

  def dropNamespace(namespace: Array[String], cascade: Boolean): Boolean = {
    if (namespace.isEmpty || !namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    if (listTables(namespace).nonEmpty || listNamespaces(namespace).nonEmpty) {
      if (!cascade) throw new NonEmptyNamespaceException(namespace)
      throw new UnsupportedOperationException(
        s"catalog $catalogName: will not drop namespace ${namespace.mkString(".")} with its tables; remove them with Lance first")
    }
    ask("drop_namespace", namespace.toSeq)
    true
  }

  def checkPath(path: String): String = bounds.checkPath(path)
}

object LanceDirectoryNamespace {
  /** The catalog's `impl` setting: only Lance's directory namespace is read here. */
  def check(catalogName: String, impl: String): Unit =
    if (!impl.trim.equalsIgnoreCase("dir")) throw new LanceCompactException(
      s"catalog $catalogName: impl '$impl' is not supported; impl=dir (a Lance directory namespace, " +
        "as lance-spark writes it, with root=<folder or URI>), impl=rest (a Lance REST namespace, with " +
        "uri=<endpoint>) and impl=glue (AWS Glue) are, or leave impl unset and set warehouse", null)
}
