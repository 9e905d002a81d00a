package io.github.lancecompact.spark.guard

/** The guard's one error: what was refused, why, and the setting that would allow it (if any). */
object Refusal {
  val Guard = "io.github.lancecompact.spark.SharedServerGuard"

  /** A name as a message shows it: control characters escaped, at most 200 characters. */
  def shown(name: String): String = {
    val escaped = name.flatMap {
      case '\n' => "\\n"
      case '\r' => "\\r"
      case '\t' => "\\t"
      case c if Character.isISOControl(c) || Character.getType(c) == Character.FORMAT => f"\\u${c.toInt}%04x"
      case c => c.toString
    }
    if (escaped.length > 200) escaped.take(200) + "..." else escaped
  }

  def apply(what: String, why: String, allowedBy: Option[(String, String)] = None): UnsupportedOperationException = {
    val allow = allowedBy.map { case (key, entry) => s"; the operator allows it with $key=${shown(entry)}" }
      .getOrElse("")
    new UnsupportedOperationException(s"${shown(what)} is refused on this server ($Guard): $why$allow")
  }
}
