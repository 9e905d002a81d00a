package io.github.lancecompact.spark.catalog

import java.nio.file.{Files, LinkOption, Path}

import scala.util.matching.Regex

import scala.jdk.CollectionConverters._
import scala.util.Try

/** The one boundary of a catalog's warehouse, which every way to a namespace or table goes
 * through ([[Warehouse]]'s locations, paths given as table arguments, the tables a Lance
 * directory namespace names). A local location is inside when its REAL path (symbolic links
 * resolved, also those of its existing parents) lies under the warehouse's real root, and, for
 * a table, so do its immediate folders (`_versions`, `data`, ...), which Lance writes into; a
 * location on an object store (no links there) when, in normal form
 * ([[WarehouseBoundary.normalise]]: the text Lance reads as written), its segments continue the
 * root's. The location checked is the location used: [[check]] returns it.
 */
final class WarehouseBoundary(catalogName: String, rawRoot: Option[String]) {
  private val root: Option[String] = rawRoot.map { r =>
    try WarehouseBoundary.normalise(r) catch {
      case e: IllegalArgumentException => throw new IllegalArgumentException(s"catalog $catalogName: the warehouse ${e.getMessage}")
    }
  }
  private val localRoot: Option[Path] = root.flatMap(Warehouse.localPath).map(_.toAbsolutePath.normalize())

  /** The warehouse as a local path (absolute, normalized), when it is one. */
  def local: Option[Path] = localRoot

  /** The warehouse as every location in it is written: its local path, or its URI in normal form;
   * what the engine checks the locations it opens against (python/lance_compact/runtime/locations.py). */
  def normalRoot: Option[String] = localRoot.map(_.toString).orElse(root)

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
      case (None, None) =>
        val l = WarehouseBoundary.normalise(location)
        if (l == r || l.startsWith(r + "/")) None else Some("")
      case _ => Some("")
    }
  }

  /** Whether `location` lies inside the warehouse (for listings, which leave out what does not). */
  def contains(location: String, table: Boolean = false): Boolean = outside(location, table).isEmpty

  /** `location` in normal form, if it lies inside the warehouse; else a refusal naming `what`. */
  def check(location: String, what: String, table: Boolean = false): String = {
    val normal = try WarehouseBoundary.normalise(location) catch {
      case e: IllegalArgumentException => throw new IllegalArgumentException(s"$what: ${e.getMessage}", e)
    }
    outside(normal, table).foreach { why =>
      throw new IllegalArgumentException(
        s"$what is outside the warehouse ${root.getOrElse("")} of catalog $catalogName$why; refused")
    }
    normal
  }
}

/** Locations as Lance reads them. Lance parses a location with a scheme (`s3://`, `gs://`,
 * `az://`, `file://`, ...) as a URL: it decodes percent-escapes (`%2e%2e` is `..`), resolves dot
 * segments, drops an empty segment before a `..`, cuts at `?` and `#`, reads `S3://` as `s3://`
 * and, in a `file://` URL, a backslash as `/`; a plain path it takes literally (pylance 14.0.2,
 * ../shared/NOTES.md). Every location is put in normal form once, before the boundary sees it,
 * and that form is what Lance gets.
 */
object WarehouseBoundary {
  private val Scheme: Regex = "^([A-Za-z][A-Za-z0-9+.-]*):".r
  private val Escape: Regex = "%[0-9A-Fa-f]{2}".r

  /** The URL scheme Lance would see in `location`, as written; None for a plain path (a
   * one-letter scheme is a drive letter). */
  def scheme(location: String): Option[String] =
    Scheme.findFirstMatchIn(location).map(_.group(1)).filter(_.length > 1)

  /** Whether `location` is on an object store (a URL other than `file:`). */
  def objectStore(location: String): Boolean = scheme(location).exists(!_.equalsIgnoreCase("file"))

  /** Why a name or path on an object store would be read as another one by Lance's URL parsing:
   * a percent-escape (decoding it would change the text), `?`, `#` or a backslash. */
  def urlHazard(text: String): Option[String] =
    Escape.findFirstIn(text).map(e => s"the percent-escape '$e' (Lance decodes escapes in a URL: '%2e%2e' is '..', " +
      "'%2f' is '/'); names and paths holding one are refused on object stores")
      .orElse(Seq('?' -> "a '?' (Lance cuts a URL there)", '#' -> "a '#' (Lance cuts a URL there)",
        '\\' -> "a backslash (Lance reads it as '/' in a file:// URL)").collectFirst { case (c, why) if text.indexOf(c) >= 0 => why })

  /** `location` in normal form: a plain path as written (the local boundary resolves it); a
   * `file:` URI with a lower-case scheme; an object-store URI as `<scheme>://<bucket>/<seg>/...`
   * with a lower-case scheme, the bucket as written (compared exactly: another spelling is
   * another bucket), no `.` or empty segment and no trailing `/`. Refused (IllegalArgumentException,
   * saying why): control characters; on an object store a percent-escape, `?`, `#`, a backslash,
   * a `..` segment, a missing `//` or bucket. */
  def normalise(location: String): String = {
    def refuse(why: String): Nothing =
      throw new IllegalArgumentException(s"location '${Names.show(location)}' is refused: it holds $why")
    if (location.exists(c => c < 0x20 || c == 0x7f)) refuse("a control character")
    scheme(location) match {
      case None => location
      case Some(s) if s.equalsIgnoreCase("file") =>
        Seq('?' -> "a '?' (Lance cuts a URL there)", '#' -> "a '#' (Lance cuts a URL there)",
          '\\' -> "a backslash (Lance reads it as '/' in a file:// URL)")
          .collectFirst { case (c, why) if location.indexOf(c) >= 0 => why }.foreach(refuse)
        "file" + location.substring(s.length)
      case Some(s) =>
        urlHazard(location).foreach(refuse)
        val rest = location.substring(s.length + 1)
        if (!rest.startsWith("//")) refuse(s"no '//' after '$s:' (write ${s.toLowerCase}://<bucket>/<path>)")
        val (authority, path) = rest.drop(2).span(_ != '/')
        if (authority.isEmpty) refuse("no bucket (nothing between '//' and the path)")
        val segments = path.split('/').filter(p => p.nonEmpty && p != ".")
        if (segments.contains("..")) refuse("a '..' segment (it leads out of the folder it names)")
        (s"${s.toLowerCase}://$authority" +: segments.toSeq).mkString("/")
    }
  }
}
