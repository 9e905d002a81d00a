package io.github.lancecompact.spark.catalog

import java.util.Locale

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkConf
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** Whose settings configure a catalog. Spark builds a catalog from the session's SQL
 * configuration when a session first names it, so a `SET spark.sql.catalog.<name>.<key>`
 * before that would reach `initialize`. Hence:
 *
 *  - the operator's catalog (its class registered in the driver's static configuration, the
 *    SparkContext's conf) is configured by the operator alone: every key `initialize` reads
 *    ([[Locked]]: where the data is, how it is reached, what a read may cost, the maintenance
 *    policy) comes from the static conf, and a session value that differs is refused, naming
 *    the key, never applied;
 *  - a catalog a user defines by SET (its class registered only in the session) gets only its
 *    own session settings: a static value (the operator's, credentials included) never falls
 *    into it.
 */
object CatalogSettings {
  /** Keys read by LanceCatalog.initialize (lower case); `storage.` and `maintain.` are prefixes. */
  val Locked: Set[String] = Set("warehouse", "root", "impl", "single_level_ns", "read_max_rows", "distributed_reads",
    "uri", "delimiter", "region", "catalog_id", "endpoint", "access_key_id", "secret_access_key", "session_token",
    "max_retries", "retry_mode", "ugi", "client.pool-size", "parent", "parent_delimiter")
  /** A catalog service's headers (`headers.x-api-key`, lance-spark's spelling; `header.`) and TLS settings too,
   * and Hadoop's (`hadoop.hive.metastore.uris`, a Hive Metastore's address as lance-spark reads it). */
  val LockedPrefixes: Seq[String] = Seq("storage.", "maintain.", "headers.", "header.", "tls.", "hadoop.")

  def locked(key: String): Boolean = {
    val k = key.toLowerCase(Locale.ROOT)
    Locked.contains(k) || LockedPrefixes.exists(k.startsWith)
  }

  private val ClassPath = "[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)+".r

  /** An `impl` naming a Python class (`package.module.Class`, a Lance Namespace implementation of
   * the operator's): every setting of such a catalog is its service's property, so all are locked. */
  def classPathImpl(impl: String): Boolean = ClassPath.pattern.matcher(impl.trim).matches()

  /** The catalog's static settings (key without the prefix -> value). */
  private def static(conf: SparkConf, name: String): Map[String, String] =
    conf.getAllWithPrefix(s"spark.sql.catalog.$name.").toMap

  /** Whether the catalog `name` of class `cls` is the operator's: registered so statically. */
  def operators(conf: Option[SparkConf], name: String, cls: String): Boolean =
    conf.exists(_.getOption(s"spark.sql.catalog.$name").exists(_.trim == cls))

  /** The settings `initialize` may use: see the object's doc. `conf` is the static conf (None
   * outside a Spark driver: the options are taken as given). */
  def resolve(name: String, options: CaseInsensitiveStringMap, conf: Option[SparkConf], cls: String): CaseInsensitiveStringMap = {
    val fromSession = options.asCaseSensitiveMap().asScala.toMap
    conf match {
      case None => options
      case Some(c) =>
        val fixed = static(c, name)
        val fixedLower = fixed.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }
        // a class-path service takes any key as its property: every key is the operator's
        val everyKey = fixedLower.get("impl").exists(classPathImpl)
        def locked(k: String): Boolean = everyKey || CatalogSettings.locked(k)
        if (operators(conf, name, cls)) {
          fromSession.toSeq.sortBy(_._1).foreach { case (k, v) =>
            if (locked(k) && !fixedLower.get(k.toLowerCase(Locale.ROOT)).contains(v)) throw new IllegalArgumentException(
              s"catalog $name: spark.sql.catalog.$name.$k is set by the operator and cannot be changed in a session" +
                (if (fixedLower.contains(k.toLowerCase(Locale.ROOT))) "" else " (the operator left it unset)") +
                s"; RESET spark.sql.catalog.$name.$k, or define a catalog of your own")
          }
          new CaseInsensitiveStringMap(fixed.filter { case (k, _) => locked(k) }.asJava)
        } else {
          // The session's own values only: whatever equals a static value of that key came from the operator.
          val own = fromSession.filterNot { case (k, v) => fixedLower.get(k.toLowerCase(Locale.ROOT)).contains(v) }
          val forced = unsigned(own)
          new CaseInsensitiveStringMap((own.filterNot { case (k, _) => forced.keySet.exists(_.equalsIgnoreCase(k)) } ++ forced).asJava)
        }
    }
  }

  private def has(storage: Set[String], keys: String*): Boolean = keys.exists(storage.contains)

  /** For a user's own catalog, `storage.<cloud>_skip_signature` for every cloud it gives no
   * credentials of its own for: Lance would otherwise sign its requests with whatever the
   * driver's process finds (environment variables, instance metadata: the operator's), also to
   * an endpoint the user chose. ("1", not "true": the engine redacts every value of 3 or more
   * characters of a key named like `signature` from its logs.) */
  def unsigned(own: Map[String, String]): Map[String, String] = {
    val storage = own.keySet.map(_.toLowerCase(Locale.ROOT)).filter(_.startsWith("storage.")).map(_.stripPrefix("storage."))
    val aws = has(storage, "aws_access_key_id", "access_key_id") && has(storage, "aws_secret_access_key", "secret_access_key")
    val azure = storage.exists(k => (k.startsWith("azure_") || !k.contains("_") || k.startsWith("account_") ||
      k.startsWith("access_") || k.startsWith("sas_") || k.startsWith("bearer_") || k.startsWith("client_")) &&
      Seq("key", "sas", "token", "secret").exists(k.contains) && !k.startsWith("aws_") && !k.startsWith("google_"))
    val google = storage.exists(k => k.contains("service_account") || k.contains("application_credentials"))
    Seq("aws" -> aws, "azure" -> azure, "google" -> google).collect {
      case (cloud, false) => s"storage.${cloud}_skip_signature" -> "1"
    }.toMap
  }
}
