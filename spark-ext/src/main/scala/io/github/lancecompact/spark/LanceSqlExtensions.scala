package io.github.lancecompact.spark

import org.apache.spark.sql.SparkSessionExtensions

import io.github.lancecompact.spark.sql.HintingParser

/** `spark.sql.extensions=io.github.lancecompact.spark.LanceSqlExtensions` (configure_spark_with_
 * lance_compact and lance-spark-sql set it): Spark's parser with hints for the statements of
 * Delta, Iceberg and lance-spark that people type by habit (`OPTIMIZE t ZORDER BY (a)` fails
 * naming `CALL lance.compact(table => 't', sort_order => 'zorder(a)')`). Nothing else changes. */
final class LanceSqlExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectParser((_, delegate) => HintingParser(delegate))
}
