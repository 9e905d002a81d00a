package io.github.lancecompact.spark.catalog

import java.net.URI
import java.nio.file.{Files, Path, Paths}

import org.apache.spark.sql.catalyst.analysis.{NamespaceAlreadyExistsException, NoSuchNamespaceException, NoSuchTableException, NonEmptyNamespaceException}
import org.apache.spark.sql.connector.catalog.Identifier

/** Where the catalog's namespaces and tables live: namespaces are folders, a table `t` is
 * the Lance dataset `t.lance` in its namespace's folder. Every identifier and path a user
 * gives is checked to stay inside the warehouse. A local warehouse is read with java.nio,
 * any other (s3://, gs://, az://, ...) through `objectStore`.
 */
final class Warehouse(catalogName: String, root: Option[String],
                      objectStore: => WarehouseStore = Warehouse.noObjectStore) extends TableDirectory {
  import Warehouse._

  /** The warehouse as a local path, when it is one (no scheme, or file:). */
  private val localRoot: Option[Path] = root.flatMap(localPath).map(p => p.toAbsolutePath.normalize())

  private lazy val store: WarehouseStore = if (localRoot.isDefined) LocalStore else objectStore

  def location: Option[String] = root

  private def requireRoot(what: String): String = root.getOrElse(throw new IllegalArgumentException(
    s"catalog $catalogName has no warehouse: set spark.sql.catalog.$catalogName.warehouse to use $what"))

  private def checkPart(part: String, what: String): Unit = {
    if (part.isEmpty || part == "." || part == ".." || part.contains('/') || part.contains('\\')) {
      throw new IllegalArgumentException(
        s"$what '$part' escapes the warehouse of catalog $catalogName: names may not be empty, " +
          "'.' or '..', nor contain '/' or '\\'")
    }
  }

  def namespaceLocation(namespace: Array[String]): String = {
    val base = localRoot.map(_.toString).getOrElse(requireRoot(s"namespace ${namespace.mkString(".")}"))
    namespace.foreach(checkPart(_, "namespace"))
    (base.stripSuffix("/") +: namespace.toSeq).mkString("/")
  }

  def tableLocation(ident: Identifier): String = {
    checkPart(ident.name, "table")
    namespaceLocation(ident.namespace) + "/" + ident.name + TableSuffix
  }

  def namespaceExists(namespace: Array[String]): Boolean =
    namespace.isEmpty || store.exists(namespaceLocation(namespace))

  def tableExists(ident: Identifier): Boolean = store.exists(tableLocation(ident))

  override def listedLocation(ident: Identifier): Option[String] = Some(tableLocation(ident))

  def findTable(ident: Identifier): Option[String] =
    if (namespaceExists(ident.namespace) && tableExists(ident)) Some(tableLocation(ident)) else None

  /** Fail with Spark's own errors when a namespace or table does not exist. */
  override def requireTable(ident: Identifier): String = {
    val location = tableLocation(ident)
    if (!namespaceExists(ident.namespace)) throw new NoSuchNamespaceException(ident.namespace)
    if (!tableExists(ident)) throw new NoSuchTableException(ident)
    location
  }

  private def requireNamespace(namespace: Array[String]): Seq[String] = {
    if (!namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    store.folders(namespaceLocation(namespace))
  }

  /** Child namespaces: folders that are neither tables nor hidden (`.x`, `_x`). */
  def listNamespaces(namespace: Array[String]): Array[Array[String]] =
    requireNamespace(namespace)
      .filterNot(n => n.endsWith(TableSuffix) || n.startsWith(".") || n.startsWith("_"))
      .map(n => namespace :+ n).toArray

  /** Tables: `<name>.lance` folders. */
  def listTables(namespace: Array[String]): Array[Identifier] =
    requireNamespace(namespace).filter(_.endsWith(TableSuffix))
      .map(n => Identifier.of(namespace, n.stripSuffix(TableSuffix))).toArray

  def createNamespace(namespace: Array[String]): Unit = {
    if (namespace.isEmpty) throw new NamespaceAlreadyExistsException(namespace)
    if (namespaceExists(namespace)) throw new NamespaceAlreadyExistsException(namespace)
    store.create(namespaceLocation(namespace))
  }

  /** Drops an empty namespace; one holding tables or namespaces is kept (Lance writes tables). */
  def dropNamespace(namespace: Array[String], cascade: Boolean): Boolean = {
    if (namespace.isEmpty || !namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    if (!store.dropEmpty(namespaceLocation(namespace))) {
      if (!cascade) throw new NonEmptyNamespaceException(namespace)
      throw new UnsupportedOperationException(
        s"catalog $catalogName: will not drop namespace ${namespace.mkString(".")} with its tables; remove them with Lance first")
    }
    true
  }

  /** A path or URI a user gave as a table: checked to lie inside the warehouse, if one is set. */
  def checkPath(path: String): String = {
    if (path.split("[/\\\\]").contains("..")) {
      throw new IllegalArgumentException(
        s"table path '$path' escapes the warehouse of catalog $catalogName: '..' segments are not allowed")
    }
    root match {
      case None => path
      case Some(r) =>
        (localRoot, localPath(path)) match {
          case (Some(lr), Some(p)) =>
            val abs = p.toAbsolutePath.normalize()
            // Follow symlinks of what exists, so a link cannot lead out of the warehouse.
            val real = if (Files.exists(abs)) abs.toRealPath() else abs
            val realRoot = if (Files.exists(lr)) lr.toRealPath() else lr
            if (!real.startsWith(realRoot)) outside(path, r)
            abs.toString
          case (None, None) =>
            val base = r.stripSuffix("/") + "/"
            if (!path.startsWith(base)) outside(path, r)
            path
          case _ => outside(path, r)
        }
    }
  }

  private def outside(path: String, r: String): Nothing = throw new IllegalArgumentException(
    s"table path '$path' is outside the warehouse $r of catalog $catalogName")
}

object Warehouse {
  val TableSuffix = ".lance"

  private def noObjectStore: WarehouseStore =
    throw new UnsupportedOperationException("this warehouse has no object store access configured")

  /** A local path for a plain path or file: URI; None for other schemes (s3://, gs://, ...). */
  def localPath(location: String): Option[Path] = {
    if (location.startsWith("file:")) Some(Paths.get(new URI(location)))
    else if (location.contains("://")) None
    else Some(Paths.get(location))
  }
}
