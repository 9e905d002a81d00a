package io.github.lancecompact.spark.engine

import java.util

import org.apache.spark.{SparkConf, SparkContext, SparkEnv}
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import io.github.lancecompact.spark.ui.{LanceTabPages, LanceUiListener}

/** `spark.plugins=io.github.lancecompact.spark.engine.EnginePlugin` (optional; set by
 * `lance-spark-sql` and `configure_spark_with_lance_compact`): starts the driver's engine and
 * the executors' Python workers while the session starts, rather than on the first
 * statement that names the catalog. Without it everything works the same, the first CALL
 * of a session only waits longer.
 *
 * It adds the Lance tab to the live Spark UI (`spark.lance.compact.ui.enabled`, default true;
 * docs/lance-tab.md): the history server's comes from the same events (LanceCompactHistoryPlugin).
 *
 * It registers `maintain_warehouse`'s metrics ([[MaintenanceMetrics]]) with Spark's metrics system.
 *
 * It also makes Spark redact every catalog storage option (`spark.sql.catalog.<name>.storage.*`:
 * keys, key ids, tokens) in the event log and the UI, whose default pattern misses names such
 * as `aws_access_key_id`; it extends `spark.redaction.regex` before Spark records its settings.
 */
class EnginePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new DriverPlugin with Logging {
    override def init(sc: SparkContext, ctx: PluginContext): util.Map[String, String] = {
      // The context's own conf (SparkEnv shares it): Spark reads the pattern when it redacts.
      Option(SparkEnv.get).foreach(env => EnginePlugin.redactStorageOptions(env.conf))
      // maintain_warehouse's figures, under plugin.<this class>.maintenance.* in every sink.
      Option(ctx).foreach(_.metricRegistry().register("maintenance", MaintenanceMetrics.registry))
      // The pool's spare worker starts now, beside the rest of the session's start (its
      // Python, pyspark, pylance and the Lance session take a second or two): the first
      // statement finds it ready. It waits for the context to be made before it uses it.
      EnginePool.warmUp(sc)
      // The driver's own first-statement code (the SQL parser's tables, result schemas and
      // their generated code), on a thread of its own while the session is made.
      if (sc.getConf.getBoolean(EnginePlugin.WarmUpConf, true)) JvmWarmUp.start()
      // The Lance tab (/lance/) in the live UI; its cancel is Spark's cancel of the statement's tag.
      if (sc.getConf.getBoolean(EnginePlugin.UiConf, true)) {
        try org.apache.spark.ui.LanceCompactTab.attachLive(sc, store => new LanceUiListener(store), LanceTabPages.pages)
          .foreach(_.attachCancel(id => Progress.cancel(sc, id)))
        catch { case e: Exception => logWarning(s"the Lance tab was not added to the Spark UI: $e") }
      }
      util.Collections.emptyMap()
    }
  }

  override def executorPlugin(): ExecutorPlugin = null
}

object EnginePlugin {
  val RedactionKey = "spark.redaction.regex"
  val UiConf = "spark.lance.compact.ui.enabled"
  /** Whether the plugin warms the driver's first-statement code paths ([[JvmWarmUp]]). */
  val WarmUpConf = "spark.lance.compact.warmUp"
  /** Catalog storage options, whatever the store calls its keys. */
  val StorageOptions = """catalog\.[^.]+\.(storage\.|headers?\.|access_key_id|secret_access_key|session_token)"""
  private val SparkDefault = "(?i)secret|password|token|access[.]?key"

  /** `spark.redaction.regex` extended to cover catalog storage options (kept if it already does). */
  def redactionRegex(current: Option[String]): String = {
    val base = current.getOrElse(SparkDefault)
    if (base.contains(StorageOptions)) base else s"$base|$StorageOptions"
  }

  /** Whether Spark redacts a catalog's storage option `key` (e.g. storage.aws_access_key_id). */
  def redacts(conf: SparkConf, catalog: String, key: String): Boolean =
    conf.getOption(RedactionKey).getOrElse(SparkDefault).r.findFirstIn(s"spark.sql.catalog.$catalog.storage.$key").isDefined

  def redactStorageOptions(conf: SparkConf): Unit =
    conf.set(RedactionKey, redactionRegex(conf.getOption(RedactionKey)))
}
