package io.github.lancecompact.spark.sql

import java.util.Locale

/** Statements Delta, Iceberg and lance-spark users type by habit, and ours that do the same:
 * the hint a failed statement gets. Names are given back as written (the catalog the user
 * named, else `lance`). */
object HabitHints {
  private val Name = """((?:`[^`]*`|[A-Za-z_][\w$]*)(?:\.(?:`[^`]*`|[A-Za-z_][\w$]*))*)"""
  private val Optimize = ("""(?is)^\s*OPTIMIZE\s+(?:TABLE\s+)?""" + Name + """(.*)$""").r
  private val ZOrder = """(?is).*\bZORDER\s+BY\s*\(?\s*([^)]*?)\s*\)?\s*;?\s*$""".r
  private val Vacuum = ("""(?is)^\s*VACUUM\s+(?:TABLE\s+)?""" + Name + """(?:\s+RETAIN\s+(\d+)\s+HOURS?)?.*$""").r
  private val History = ("""(?is)^\s*DESC(?:RIBE)?\s+HISTORY\s+""" + Name + """.*$""").r
  private val IcebergCall = ("""(?is)^\s*CALL\s+(?:""" + Name + """\.)?system\.(rewrite_data_files|expire_snapshots|remove_orphan_files|rewrite_manifests|rewrite_position_delete_files)\b.*$""").r

  /** The hint for `sql`, when it is one of those habits. */
  def hint(sql: String): Option[String] = sql match {
    case Optimize(name, rest) =>
      val (catalog, table) = split(name)
      val order = rest match {
        case ZOrder(cols) if cols.trim.nonEmpty => s", sort_order => 'zorder(${cols.trim})'"
        case _ => ""
      }
      Some(s"OPTIMIZE is Delta's (and lance-spark's) statement; with this catalog compact a table with " +
        s"CALL $catalog.compact(table => '$table'$order) (clustering: sort_order => 'zorder(a, b)', or " +
        s"ALTER TABLE $catalog.$table CLUSTER BY (a, b) once and CALL $catalog.maintain(table => '$table'))")
    case Vacuum(name, hours) =>
      val (catalog, table) = split(name)
      val age = Option(hours).map(h => s"$h hours").getOrElse("7 days")
      Some(s"VACUUM is Delta's statement; with this catalog remove old versions and unreferenced files with " +
        s"CALL $catalog.cleanup(table => '$table', older_than => '$age')")
    case History(name) =>
      val (catalog, table) = split(name)
      Some(s"DESCRIBE HISTORY is Delta's statement; with this catalog a table's versions are " +
        s"SELECT * FROM $catalog.$table.versions, and what maintenance did is " +
        s"SELECT * FROM $catalog.system.maintenance_history")
    case IcebergCall(cat, procedure) =>
      val catalog = Option(cat).getOrElse("lance")
      val ours = procedure.toLowerCase(Locale.ROOT) match {
        case "rewrite_data_files" | "rewrite_position_delete_files" =>
          s"CALL $catalog.compact(table => 'db.t') (strategy => 'binpack' or 'sort' as in Iceberg, sort_order => ...)"
        case "expire_snapshots" => s"CALL $catalog.cleanup(table => 'db.t', older_than => '7 days')"
        case "remove_orphan_files" => s"CALL $catalog.cleanup(table => 'db.t', delete_unverified => true)"
        case _ => s"nothing: Lance has no manifests to rewrite (CALL $catalog.maintain(table => 'db.t') for everyday upkeep)"
      }
      Some(s"system.$procedure is Iceberg's procedure; with this catalog use $ours")
    case _ => None
  }

  /** `cat.ns.t` -> (cat, ns.t); a name without a catalog part -> (lance, name). */
  private def split(name: String): (String, String) = {
    val parts = name.split('.')
    if (parts.length >= 3) (parts.head, parts.tail.mkString(".")) else ("lance", name)
  }
}
