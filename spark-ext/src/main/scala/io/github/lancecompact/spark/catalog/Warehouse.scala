package io.github.lancecompact.spark.catalog

import java.net.URI
import java.nio.file.{Path, Paths}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.analysis.{NamespaceAlreadyExistsException, NoSuchNamespaceException, NoSuchTableException, NonEmptyNamespaceException}
import org.apache.spark.sql.connector.catalog.Identifier

/** Where the catalog's namespaces and tables live: namespaces are folders, a table `t` is
 * the Lance dataset `t.lance` in its namespace's folder. Every identifier and path a user
 * gives is checked to stay inside the warehouse: every location is built by
 * [[namespaceLocation]] / [[tableLocation]] or given to [[checkPath]], and all three go through
 * the warehouse's [[WarehouseBoundary]] (real paths, symbolic links resolved). A local
 * warehouse is read with java.nio, any other (s3://, gs://, az://, ...) through `objectStore`.
 */
final class Warehouse(catalogName: String, root: Option[String],
                      objectStore: => WarehouseStore = Warehouse.noObjectStore) extends TableDirectory with Logging {
  import Warehouse._

  private val boundary = new WarehouseBoundary(catalogName, root)

  /** The warehouse as a local path, when it is one (no scheme, or file:). */
  private val localRoot: Option[Path] = boundary.local

  private lazy val store: WarehouseStore = if (localRoot.isDefined) LocalStore else objectStore

  def location: Option[String] = root

  override def boundaryRoot: Option[String] = boundary.normalRoot

  private def requireRoot(what: String): String = root.getOrElse(throw new IllegalArgumentException(
    s"catalog $catalogName has no warehouse: set spark.sql.catalog.$catalogName.warehouse to use $what"))

  private def checkPart(part: String, what: String): Unit = {
    Names.checkText(catalogName, what, part)
    if (part.isEmpty || part == "." || part == ".." || part.contains('/') || part.contains('\\')) {
      throw new IllegalArgumentException(
        s"$what '$part' escapes the warehouse of catalog $catalogName: names may not be empty, " +
          "'.' or '..', nor contain '/' or '\\'")
    }
    Names.checkLength(catalogName, what, if (what == "table") part + TableSuffix else part)
    // On an object store Lance reads a location as a URL: '%2e%2e' in a name would be '..'.
    if (localRoot.isEmpty) boundary.normalRoot.filter(WarehouseBoundary.objectStore).foreach { _ =>
      WarehouseBoundary.urlHazard(part).foreach { why =>
        throw new IllegalArgumentException(s"$what '${Names.show(part)}' is refused in catalog $catalogName: it holds $why")
      }
    }
  }

  private def unchecked(namespace: Array[String]): String = {
    val base = boundary.normalRoot.getOrElse(requireRoot(s"namespace ${namespace.mkString(".")}"))
    namespace.foreach(checkPart(_, "namespace"))
    // Lance's folders inside a table (`_versions`, ...) and tables themselves are no namespaces.
    namespace.find(Names.layoutName).foreach { part => throw new IllegalArgumentException(
      s"namespace ${namespace.mkString(".")} of catalog $catalogName names '$part', a table's or Lance's own folder, " +
        s"not a namespace (namespaces are neither '*${TableSuffix}' nor start with '_' or '.')") }
    (base.stripSuffix("/") +: namespace.toSeq).mkString("/")
  }

  private def uncheckedTable(ident: Identifier): String = {
    checkPart(ident.name, "table")
    unchecked(ident.namespace) + "/" + ident.name + TableSuffix
  }

  def namespaceLocation(namespace: Array[String]): String =
    boundary.check(unchecked(namespace), s"namespace ${namespace.mkString(".")}")

  def tableLocation(ident: Identifier): String =
    boundary.check(uncheckedTable(ident), s"table ${(ident.namespace :+ ident.name).mkString(".")}", table = true)

  // The location first: a refused name never reaches the store.
  def namespaceExists(namespace: Array[String]): Boolean =
    namespace.isEmpty || { val location = namespaceLocation(namespace); store.exists(location) }

  def tableExists(ident: Identifier): Boolean = { val location = tableLocation(ident); store.exists(location) }

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

  /** Whether a listed folder is inside the warehouse; what is not is left out, with a note. */
  private def listable(what: String, location: => String, table: Boolean): Boolean = {
    val why = try boundary.outside(location, table) catch { case e: IllegalArgumentException => Some(s": ${e.getMessage}") }
    why.foreach(w => logWarning(s"catalog $catalogName: leaving $what out of listings: it is outside the warehouse$w"))
    why.isEmpty
  }

  private def namespacesIn(namespace: Array[String], folders: Seq[String]): Seq[Array[String]] =
    folders.filterNot(n => n.endsWith(TableSuffix) || n.startsWith(".") || n.startsWith("_"))
      .map(n => namespace :+ n)
      .filter(ns => listable(s"namespace ${Names.show(ns.mkString("."))}", unchecked(ns), table = false))

  private def tablesIn(namespace: Array[String], folders: Seq[String]): Seq[Identifier] =
    folders.filter(_.endsWith(TableSuffix))
      .map(n => Identifier.of(namespace, n.stripSuffix(TableSuffix)))
      .filter(id => listable(s"table ${Names.show((namespace :+ id.name).mkString("."))}", uncheckedTable(id), table = true))

  /** Child namespaces: folders that are neither tables nor hidden (`.x`, `_x`), nor lead out of the warehouse. */
  def listNamespaces(namespace: Array[String]): Array[Array[String]] =
    namespacesIn(namespace, requireNamespace(namespace)).toArray

  /** Tables: `<name>.lance` folders (inside the warehouse). */
  def listTables(namespace: Array[String]): Array[Identifier] = tablesIn(namespace, requireNamespace(namespace)).toArray

  /** Both from one listing of the namespace's folder (a walk's namespace was just listed or
   * checked: on an object store each listing is a round trip through the engine). */
  override protected def children(ns: Array[String]): (Seq[Identifier], Seq[Array[String]]) = {
    val folders = store.folders(namespaceLocation(ns))
    (if (ns.isEmpty) Nil else tablesIn(ns, folders), namespacesIn(ns, folders))
  }

  def createNamespace(namespace: Array[String]): Unit = {
    Names.checkNewNamespace(catalogName, namespace.toSeq)
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
    Names.checkText(catalogName, "table path", path)
    if (path.split("[/\\\\]").contains("..")) {
      throw new IllegalArgumentException(
        s"table path '$path' escapes the warehouse of catalog $catalogName: '..' segments are not allowed")
    }
    val normal = try WarehouseBoundary.normalise(path) catch {
      case e: IllegalArgumentException => throw new IllegalArgumentException(
        s"table path '${Names.show(path)}' of catalog $catalogName: ${e.getMessage}", e)
    }
    // A local location goes on as an absolute, normalized plain path, which Lance reads literally
    // (a file: URI is decoded once, here).
    val location = localPath(normal).filter(_ => localRoot.isDefined || root.isEmpty)
      .map(_.toAbsolutePath.normalize().toString).getOrElse(normal)
    if (root.isEmpty) location else boundary.check(location, s"table path '$path'", table = true)
  }
}

object Warehouse {
  val TableSuffix = ".lance"

  private def noObjectStore: WarehouseStore =
    throw new UnsupportedOperationException("this warehouse has no object store access configured")

  /** A local path for a plain path or file: URI (decoded as Lance decodes it); None for other
   * schemes (s3://, gs://, ...). */
  def localPath(location: String): Option[Path] = WarehouseBoundary.scheme(location).map(_.toLowerCase) match {
    case Some("file") =>
      try Some(Paths.get(new URI("file" + location.substring(4)))) catch {
        case e @ (_: java.net.URISyntaxException | _: IllegalArgumentException | _: java.nio.file.FileSystemNotFoundException) =>
          throw new IllegalArgumentException(s"'${Names.show(location)}' is not a file: URI of a local path: ${e.getMessage}", e)
      }
    case Some(_) => None
    case None => Some(Paths.get(location))
  }
}
