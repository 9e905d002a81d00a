package io.github.lancecompact.spark.guard

import java.util.Locale

import scala.util.matching.Regex

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.parser.ParserInterface

import io.github.lancecompact.spark.sql.ParserProxy
import org.apache.spark.sql.execution.command.ResetCommand
import org.apache.spark.sql.internal.SQLConf

/** The guard's first look at a statement, before Spark parses it (so before anything resolves a
 * catalog, reads a setting or runs): Spark's parser behind a proxy of its interface (every method
 * passed on, those a later Spark adds included) that refuses
 *
 *  - a `${env:...}` or `${system:...}` reference, which Spark's variable substitution
 *    (`spark.sql.variable.substitute`, on by default) replaces by the server's environment variable
 *    or JVM system property: `SELECT '${system:spark.sql.catalog.lake.storage.aws_secret_access_key}'`
 *    returned the operator's secret key (spark-submit makes the driver's configuration system
 *    properties), `${env:AWS_SECRET_ACCESS_KEY}` the environment's. Also when a setting's value
 *    holds one (`SET a=x` then `${a}`), and a statement whose substituted text still holds a
 *    reference Spark would substitute again (`$${b}` with `b` = `{env:X}`). The statement is
 *    substituted here, once, as Spark does it, and Spark's parser gets the result (its own
 *    substitution then finds nothing to replace: no setting changed in between can reach it);
 *  - (not a refusal) with no data source allowed, a session's `spark.sql.runSQLOnFiles` is held
 *    false: Spark opens ``parquet.`<path>` `` to infer its schema before any check sees the plan;
 *  - every statement (but `RESET`) while the session's settings hold what `SET` may not put
 *    there: a catalog's key that is not the operator's value, a redaction setting, or a value
 *    referring to the environment or system properties. Settings arrive by other ways than `SET`:
 *    a JDBC client's connection string (`jdbc:hive2://host:port/;?spark.sql.catalog.lake=<a JDBC
 *    catalog>;spark.sql.catalog.lake.url=jdbc:derby:...`, which re-registered the operator's
 *    catalog as a Derby connection whose `sessionInitStatement` bound a SQL function to
 *    `System.getProperty`; `;?spark.sql.legacy.setCommandRejectsSparkCoreConfs=false;
 *    spark.redaction.regex=x` lifted redaction), or a program's `spark.conf.set`.
 */
object GuardParser {
  /** Spark's reference syntax (`ConfigReader`): `${name}` or `${prefix:name}`. */
  private val Ref: Regex = """\$\{(?:(\w+?):)?(\S+?)\}""".r
  /** The prefixes Spark's SQL substitution binds to the session's settings (and no prefix). */
  private val SettingPrefixes = Set("spark", "sparkconf", "hivevar", "hiveconf")
  /** The prefixes Spark's substitution binds to the server's process. */
  private val ProcessPrefixes = Set("env", "system")

  def apply(session: SparkSession, policy: GuardPolicy, delegate: ParserInterface): ParserInterface =
    ParserProxy { (method, supplied) =>
      val passed = supplied.headOption match {
        case Some(sql: String) if method.getName.startsWith("parse") =>
          val checked = check(session, policy, sql)
          supplied.updated(0, checked)
        case _ => supplied
      }
      val result = ParserProxy.call(delegate, method, passed)
      // a text that began with RESET passed unchecked: it must be one
      if (method.getName.startsWith("parse") &&
        passed.headOption.exists { case sql: String => IsReset.matches(sql); case _ => false } &&
        !result.isInstanceOf[ResetCommand]) checkSettings(session, policy)
      result
    }

  /** `sql` as Spark's substitution makes it, or a refusal. */
  private[guard] def check(session: SparkSession, policy: GuardPolicy, sql: String): String = {
    // the settings Spark's own substitution reads (SQLConf.get): the session's, or while a
    // persisted view's text is parsed, the settings the view keeps from its creator's session
    val conf = SQLConf.get
    val substituted =
      if (conf.variableSubstituteEnabled) {
        // Spark's own lookup (VariableSubstitution): the session's value, redacted as SET shows it
        val setting = (key: String) => conf.redactOptions(Seq(key -> conf.getConfString(key, ""))).headOption.map(_._2)
        val text = substitute(sql, prefix => if (prefix == null || SettingPrefixes.contains(prefix)) Some(setting) else None)
          .getOrElse(throw processRefusal(s"the statement"))
        Ref.findAllMatchIn(text).find(m => m.group(1) == null || SettingPrefixes(m.group(1)) ||
          ProcessPrefixes(m.group(1))).foreach { m =>
          throw Refusal(s"the reference ${m.matched} that substituting the statement made",
            "Spark would substitute the statement's text again")
        }
        text
      } else sql
    if (!IsReset.matches(sql)) checkSettings(session, policy)
    val sessionConf = session.sessionState.conf
    // `SELECT * FROM parquet.`<path>`` (also through IDENTIFIER(<a variable>)): Spark opens the path
    // to infer a schema while it resolves the name, before any check sees a plan (an error told
    // whether any path exists and quoted a file's last bytes). With no data source allowed, none
    // may be named so: the session's setting is held off.
    if (policy.sources.isEmpty && !sessionConf.getConfString(RunSqlOnFiles, "true").trim.equalsIgnoreCase("false")) {
      sessionConf.setConfString(RunSqlOnFiles, "false")
    }
    substituted
  }

  private val RunSqlOnFiles = "spark.sql.runSQLOnFiles"
  private val IsReset = """(?is)\s*RESET\b.*""".r

  /** The session's settings: none that a session may not set, none referring to the process. */
  private def checkSettings(session: SparkSession, policy: GuardPolicy): Unit = {
    val settings = session.sessionState.conf.getAllConfs
    settings.foreach { case (key, value) =>
      val k = key.toLowerCase(Locale.ROOT)
      if (value != null && !policy.staticConf.get(key).contains(value)) {
        if (k.startsWith("spark.sql.catalog.")) {
          val catalog = key.substring("spark.sql.catalog.".length).split('.').head
          throw Refusal(s"the catalog $catalog: $key set in this session",
            s"catalogs are the operator's: a session defines none and changes none of their settings; RESET $key")
        }
        if (k == GuardCheck.RejectsCoreConfs || k.contains("redaction")) {
          throw Refusal(s"$key set in this session", s"it would lift the redaction of secrets; RESET $key")
        }
      }
      // as SQLConf reads a setting: its own references (no prefix), the environment, system properties
      // (the operator's own values may hold such references: theirs to make)
      if (value != null && value.contains("${") && !policy.staticConf.get(key).contains(value) &&
        substitute(value, prefix => if (prefix == null) Some((k: String) => settings.get(k)) else None).isEmpty) {
        throw processRefusal(s"the setting $key of this session (RESET $key)")
      }
    }
  }

  private def processRefusal(what: String): UnsupportedOperationException =
    Refusal(s"$what: a $${env:...} or $${system:...} reference",
      "Spark would replace it by the server's environment variable or JVM system property (the operator's " +
        "settings and secrets)")

  /** `input` substituted as Spark's ConfigReader does (references replaced recursively; one that
   * cannot be resolved kept as written), with `bound(prefix)` the lookup of a prefix (null: no
   * prefix); None when a reference reaches the environment or the system properties (`env:`,
   * `system:`, directly or through a setting's value). */
  private def substitute(input: String, bound: String => Option[String => Option[String]]): Option[String] = {
    var reachesProcess = false
    def go(text: String, used: Set[String]): String = Ref.replaceAllIn(text, { m =>
      val prefix = m.group(1)
      val name = m.group(2)
      val ref = if (prefix == null) name else s"$prefix:$name"
      val replacement =
        if (prefix != null && ProcessPrefixes(prefix)) { reachesProcess = true; None }
        else if (used.contains(ref)) None // Spark refuses a circular reference itself
        else bound(prefix).flatMap(_(name)).map(go(_, used + ref))
      Regex.quoteReplacement(replacement.getOrElse(m.matched))
    })
    val out = go(input, Set.empty)
    if (reachesProcess) None else Some(out)
  }
}
