package io.github.lancecompact.spark.guard

import org.apache.hadoop.conf.Configuration

/** The Thrift (JDBC/ODBC) server's own step before any statement: when it opens a session, Hive
 * applies the settings of the client's connection string (`jdbc:hive2://host:port/;?k=v#var=v`)
 * with Hive's variable substitution, which replaces `${env:NAME}` and `${system:NAME}` by the
 * server's environment variable or JVM system property: `;?x=${system:spark.sql.catalog.lake.storage.aws_secret_access_key}`
 * then `SET x` answered the operator's secret key in clear (and an invalid
 * `spark.sql.session.timeZone=${env:...}` put the value in the error of the connection itself).
 * No statement exists yet for the guard to refuse; Hive's substitution is turned off in the
 * configuration the server's sessions are made from (`hive.variable.substitute=false`), and a
 * connection string may not turn it on again (`;?hive.variable.substitute=true;x=${env:...}` did):
 * it joins `hive.conf.restricted.list`, Hive's own list of settings a session may not change, which
 * Hive reads only when it makes a configuration, from its defaults and the JVM's system properties
 * (as `--hiveconf` gives it), hence set there. Spark's own substitution of statements is
 * GuardParser's. */
object HiveSessions {
  val Substitute = "hive.variable.substitute"
  val Restricted = "hive.conf.restricted.list"

  /** Hardens `hadoopConf` (the SparkContext's, which the Thrift server's Hive configuration is made
   * from when it starts, after the first session's extensions ran). Without Hive on the class path
   * there is no Thrift server, and nothing to do. */
  def harden(hadoopConf: Configuration): Unit = hiveDefault(Restricted).foreach { default =>
    val listed = Option(System.getProperty(Restricted)).orElse(Option(hadoopConf.get(Restricted))).getOrElse(default)
      .split(",").map(_.trim).filter(_.nonEmpty)
    val restricted = (listed.toSeq :+ Substitute).distinct.mkString(",")
    hadoopConf.set(Restricted, restricted)
    hadoopConf.set(Substitute, "false")
    System.setProperty(Restricted, restricted)
    System.setProperty(Substitute, "false")
  }

  /** A HiveConf setting's default, read by name (Hive is not a compile-time dependency). */
  private def hiveDefault(name: String): Option[String] = scala.util.Try {
    val vars = Class.forName("org.apache.hadoop.hive.conf.HiveConf$ConfVars")
    val v = vars.getMethod("values").invoke(null).asInstanceOf[Array[AnyRef]]
      .find(x => x.getClass.getField("varname").get(x) == name).get
    Option(v.getClass.getMethod("getDefaultValue").invoke(v)).map(_.toString).getOrElse("")
  }.toOption
}
