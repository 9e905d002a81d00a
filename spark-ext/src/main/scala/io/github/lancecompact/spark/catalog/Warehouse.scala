package io.github.lancecompact.spark.catalog

import java.net.URI
import java.nio.file.{Files, Path, Paths}

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.connector.catalog.Identifier

/** Where the catalog's namespaces and tables live: namespaces are folders, a table `t` is
 * the Lance dataset `t.lance` in its namespace's folder. Every identifier and path a user
 * gives is checked to stay inside the warehouse.
 */
final class Warehouse(catalogName: String, root: Option[String]) {
  import Warehouse._

  /** The warehouse as a local path, when it is one (no scheme, or file:). */
  private val localRoot: Option[Path] = root.flatMap(localPath).map(p => p.toAbsolutePath.normalize())

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
    val base = requireRoot(s"namespace ${namespace.mkString(".")}")
    namespace.foreach(checkPart(_, "namespace"))
    (base.stripSuffix("/") +: namespace.toSeq).mkString("/")
  }

  def tableLocation(ident: Identifier): String = {
    checkPart(ident.name, "table")
    namespaceLocation(ident.namespace) + "/" + ident.name + TableSuffix
  }

  /** Local folder of a namespace, when the warehouse is local. */
  def localNamespace(namespace: Array[String]): Option[Path] =
    localRoot.map(r => namespace.foldLeft(r) { (p, n) => checkPart(n, "namespace"); p.resolve(n) })

  def namespaceExists(namespace: Array[String]): Boolean =
    localNamespace(namespace).forall(p => Files.isDirectory(p))

  def tableExists(ident: Identifier): Boolean =
    localNamespace(ident.namespace).forall(p => Files.isDirectory(p.resolve(ident.name + TableSuffix)))

  /** Fail with Spark's own errors when a local namespace or table does not exist. */
  def requireTable(ident: Identifier): String = {
    val location = tableLocation(ident)
    if (!namespaceExists(ident.namespace)) throw new NoSuchNamespaceException(ident.namespace)
    if (!tableExists(ident)) throw new NoSuchTableException(ident)
    location
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

  /** Child folders of a local folder, sorted by name. */
  def children(dir: Path): Seq[Path] =
    if (!Files.isDirectory(dir)) Nil
    else {
      val stream = Files.list(dir)
      try stream.iterator().asScala.filter(p => Files.isDirectory(p)).toSeq.sortBy(_.getFileName.toString)
      finally stream.close()
    }
}

object Warehouse {
  val TableSuffix = ".lance"

  /** A local path for a plain path or file: URI; None for other schemes (s3://, gs://, ...). */
  def localPath(location: String): Option[Path] = {
    if (location.startsWith("file:")) Some(Paths.get(new URI(location)))
    else if (location.contains("://")) None
    else Some(Paths.get(location))
  }
}
