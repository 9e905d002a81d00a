package org.apache.spark

/** Whether a SparkContext is made and active (SparkContext.getActive is private to Spark): an
 * engine worker the plugin starts while the context is being made waits for it
 * (io.github.lancecompact.spark.engine.EngineBridge.javaSparkContext). */
object LanceCompactActiveContext {
  def isActive(sc: SparkContext): Boolean = SparkContext.getActive.exists(_ eq sc)
}
