// A Scala Spark application that compacts one Lance table with CALL lance.compact and reads
// the result row. Compile it against Spark 4 (Scala 2.13), e.g. in an sbt project with
//   libraryDependencies += "org.apache.spark" %% "spark-sql" % "4.2.0" % Provided
// or with the Scala compiler that ships in Spark's jars folder:
//   java -cp "$SPARK_HOME/jars/*" scala.tools.nsc.Main -usejavacp -d compact-table.jar CompactTable.scala
// and run it with the catalog jar on the classpath:
//   spark-submit --master local[2] --class CompactTable \
//     --jars spark-ext/target/lance-spark-compact.jar \
//     --conf spark.sql.execution.pyspark.python=/path/to/.venv/bin/python \
//     compact-table.jar /data/wh db.events 1048576
// The Python given runs the driver's compaction engine and the executors' tasks: it must have
// lance-spark-compact (and so pylance) installed.
import org.apache.spark.sql.SparkSession

object CompactTable {
  def main(args: Array[String]): Unit = {
    if (args.length < 2 || args.length > 3) {
      System.err.println("usage: CompactTable <warehouse> <namespace.table> [target_rows_per_fragment]")
      sys.exit(2)
    }
    val warehouse = args(0)
    val table = args(1)
    val target = if (args.length == 3) args(2).toLong else 1048576L

    val spark = SparkSession.builder()
      .appName(s"compact $table")
      .config("spark.sql.catalog.lance", "io.github.lancecompact.spark.catalog.LanceCatalog")
      .config("spark.sql.catalog.lance.warehouse", warehouse)
      .getOrCreate()
    try {
      // Bound parameters: the table name is never quoted into the SQL text.
      val row = spark.sql(
        "CALL lance.compact(table => :table, target_rows_per_fragment => :target)",
        Map("table" -> table, "target" -> target)).head()
      val removed = row.getAs[Long]("fragments_removed")
      val added = row.getAs[Long]("fragments_added")
      println(s"$table: version ${row.getAs[Long]("read_version")} -> ${row.getAs[Long]("new_version")}, " +
        s"$removed fragments -> $added, ${row.getAs[Long]("rows_rewritten")} rows rewritten " +
        s"in ${row.getAs[Long]("tasks")} tasks")
      println(s"result: ${row.json}")
    } finally {
      spark.stop()
    }
  }
}
