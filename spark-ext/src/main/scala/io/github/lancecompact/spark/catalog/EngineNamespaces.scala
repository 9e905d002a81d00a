package io.github.lancecompact.spark.catalog

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.analysis.{NamespaceAlreadyExistsException, NoSuchNamespaceException, NonEmptyNamespaceException}
import org.apache.spark.sql.connector.catalog.Identifier

import io.github.lancecompact.spark.engine.PythonEngine

/** Namespaces and tables another system keeps, resolved by the engine (its `namespace`
 * request): a Lance directory namespace ([[LanceDirectoryNamespace]]) or a catalog service
 * ([[LanceNamespaceService]]). What they share: existence, listings, a table's location checked
 * by the subclass's boundary, and namespaces created and dropped (never with their tables).
 */
abstract class EngineNamespaces(catalogName: String) extends TableDirectory with Logging {
  /** The engine's `namespace` request for `op` on `id` (an EngineRequest with this catalog's fields). */
  protected def request(op: String, id: Seq[String]): String

  /** The engine's answer to `op` on `id`: rows of (name, location or null). */
  protected final def ask(op: String, id: Seq[String]): Seq[(String, String)] =
    PythonEngine.query("namespace", request(op, id)).rows().toSeq.map { row =>
      (row.getUTF8String(1).toString, if (row.isNullAt(2)) null else row.getUTF8String(2).toString)
    }

  /** A location the engine gives for a table, checked (in normal form, inside the boundary). */
  protected def checkedLocation(location: String): String

  /** What a refused location's message says it is. */
  protected def locationWhat: String = ""

  /** Namespace names the listing leaves out (with a note in the log). */
  protected def listed(namespace: Array[String], name: String): Boolean = true

  /** Refuses a namespace this catalog will not create (an exception), before the engine is asked. */
  protected def checkNewNamespace(namespace: Array[String]): Unit = ()

  def namespaceExists(namespace: Array[String]): Boolean =
    namespace.isEmpty || ask("namespace_exists", namespace.toSeq).nonEmpty

  def listNamespaces(namespace: Array[String]): Array[Array[String]] = {
    if (!namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    ask("list_namespaces", namespace.toSeq).map(_._1).filter(listed(namespace, _)).map(n => namespace :+ n).toArray
  }

  def listTables(namespace: Array[String]): Array[Identifier] = {
    if (!namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    ask("list_tables", namespace.toSeq).map(t => Identifier.of(namespace, t._1)).toArray
  }

  def findTable(ident: Identifier): Option[String] =
    ask("table", ident.namespace.toSeq :+ ident.name).headOption.map(_._2).map { location =>
      try checkedLocation(location) catch {
        case e: IllegalArgumentException => throw new IllegalArgumentException(
          s"table ${(ident.namespace :+ ident.name).mkString(".")}: $locationWhat${e.getMessage}", e)
      }
    }

  /** Tables whose location is refused are left out of catalog-wide listings (noted in the log). */
  override def listedLocation(ident: Identifier): Option[String] =
    try findTable(ident) catch {
      case e: IllegalArgumentException =>
        logWarning(s"catalog $catalogName: leaving table ${Names.show((ident.namespace :+ ident.name).mkString("."))} " +
          s"out of listings: ${Names.show(e.getMessage)}")
        None
    }

  def createNamespace(namespace: Array[String]): Unit = {
    if (namespace.isEmpty || namespaceExists(namespace)) throw new NamespaceAlreadyExistsException(namespace)
    checkNewNamespace(namespace)
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
}
