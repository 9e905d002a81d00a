package io.github.lancecompact.spark.engine

import java.util

import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

/** `spark.plugins=io.github.lancecompact.spark.engine.EnginePlugin` (optional; set by
 * `lance-spark-sql` and `configure_spark_with_lance_compact`): starts the driver's engine and
 * the executors' Python workers while the session starts, rather than on the first
 * statement that names the catalog. Without it everything works the same, the first CALL
 * of a session only waits longer.
 */
class EnginePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new DriverPlugin with Logging {
    override def init(sc: SparkContext, ctx: PluginContext): util.Map[String, String] = {
      val t = new Thread(() => {
        // The engine needs the session (its Python setting); it exists once start-up ends.
        val deadline = System.nanoTime() + 120L * 1000000000L
        var session = SparkSession.getDefaultSession
        while (session.isEmpty && !sc.isStopped && System.nanoTime() < deadline) {
          Thread.sleep(50)
          session = SparkSession.getDefaultSession
        }
        session.filter(_.sparkContext eq sc).foreach(EngineProcess.warmUp)
      }, "lance-compact-engine-plugin")
      t.setDaemon(true)
      t.start()
      util.Collections.emptyMap()
    }
  }

  override def executorPlugin(): ExecutorPlugin = null
}
