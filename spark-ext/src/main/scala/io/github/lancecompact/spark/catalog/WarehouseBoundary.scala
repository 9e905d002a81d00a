package io.github.lancecompact.spark.catalog

import java.nio.file.{Files, LinkOption, Path}

import scala.jdk.CollectionConverters._
import scala.util.Try

/** The one boundary of a catalog's warehouse, which every way to a namespace or table goes
 * through ([[Warehouse]]'s locations, paths given as table arguments, the tables a Lance
 * directory namespace names). A local location is inside when its REAL path (symbolic links
 * resolved, also those of its existing parents) lies under the warehouse's real root, and, for
 * a table, so do its immediate folders (`_versions`, `data`, ...), which Lance writes into; a
 * location on an object store (no links there) when it starts with the root's prefix.
 */
final class WarehouseBoundary(catalogName: String, root: Option[String]) {
  private val localRoot: Option[Path] = root.flatMap(Warehouse.localPath).map(_.toAbsolutePath.normalize())

  /** The warehouse as a local path (absolute, normalized), when it is one. */
  def local: Option[Path] = localRoot

  /** The real path of `p`: that of its longest existing prefix (links followed), then the rest;
   * None for a dangling link. */
  private def real(p: Path): Option[Path] = {
    var existing = p
    var rest = List.empty[Path]
    while (existing != null && !Files.exists(existing, LinkOption.NOFOLLOW_LINKS)) {
      rest = existing.getFileName :: rest
      existing = existing.getParent
    }
    if (existing == null) Some(p)
    else Try(existing.toRealPath()).toOption.map(r => rest.foldLeft(r)(_ resolve _))
  }

  private def realRoot: Option[Path] = localRoot.flatMap(real)

  /** Why `location` is outside, or None when it is inside (no warehouse set: everything is). */
  def outside(location: String, table: Boolean = false): Option[String] = root.flatMap { r =>
    (localRoot, Warehouse.localPath(location)) match {
      case (Some(_), Some(p)) =>
        val abs = p.toAbsolutePath.normalize()
        realRoot match {
          case None => Some(" (its root cannot be resolved)")
          case Some(top) =>
            def in(q: Path) = real(q).exists(_.startsWith(top))
            if (!abs.startsWith(localRoot.get) && !in(abs)) Some("")
            else if (!in(abs)) Some(" (a symbolic link leads out of it)")
            else if (table && Files.isDirectory(abs)) {
              val stream = Files.list(abs)
              val children = try stream.iterator().asScala.toList finally stream.close()
              children.find(c => !in(c)).map(c => s" (its ${Names.show(c.getFileName.toString)} is a symbolic link leading out of it)")
            } else None
        }
      case (None, None) => if (location.startsWith(r.stripSuffix("/") + "/") || location == r) None else Some("")
      case _ => Some("")
    }
  }

  /** Whether `location` lies inside the warehouse (for listings, which leave out what does not). */
  def contains(location: String, table: Boolean = false): Boolean = outside(location, table).isEmpty

  /** `location`, if it lies inside the warehouse; else a refusal naming `what`. */
  def check(location: String, what: String, table: Boolean = false): String = {
    outside(location, table).foreach { why =>
      throw new IllegalArgumentException(
        s"$what is outside the warehouse ${root.getOrElse("")} of catalog $catalogName$why; refused")
    }
    location
  }
}
