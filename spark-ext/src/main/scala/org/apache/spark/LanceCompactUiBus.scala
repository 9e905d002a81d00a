package org.apache.spark

import org.apache.spark.scheduler.SparkListenerEvent

/** The listener bus and the active context, which Spark keeps to itself (`private[spark]`): the
 * Lance tab's events are posted here (io.github.lancecompact.spark.ui.LanceUiPublish). */
object LanceCompactUiBus {
  def post(sc: SparkContext, event: SparkListenerEvent): Unit = if (!sc.isStopped) sc.listenerBus.post(event)
  def active: Option[SparkContext] = SparkContext.getActive
}
