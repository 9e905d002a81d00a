// The Spark version we compile against is the pyspark version pinned in constraints.txt (the
// exact versions the tests run), so the jar is always built against the Spark the tests run.
val sparkVersion = {
  val pin = """(?m)^\s*pyspark\s*==\s*([0-9][0-9A-Za-z.]*)\s*(#.*)?$""".r
  pin.findFirstMatchIn(IO.read(file("constraints.txt"))).map(_.group(1))
    .getOrElse(sys.error("constraints.txt must pin pyspark==X.Y.Z"))
}

ThisBuild / organization := "io.github.lancecompact"
ThisBuild / scalaVersion := "2.13.18"
ThisBuild / version := "0.1.0"
// Apache-2.0, as Lance and Spark: LICENSE and NOTICE at the root, in the jar's META-INF and
// named in its manifest (pyproject.toml says the same for the wheel).
ThisBuild / organizationName := "The lance-spark-compact authors"
ThisBuild / licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt"))

lazy val root = (project in file("."))
  .settings(
    name := "lance-spark-compact",
    Compile / scalaSource := baseDirectory.value / "spark-ext" / "src" / "main" / "scala",
    Test / scalaSource := baseDirectory.value / "spark-ext" / "src" / "test" / "scala",
    Compile / resourceDirectory := baseDirectory.value / "spark-ext" / "src" / "main" / "resources",
    Test / resourceDirectory := baseDirectory.value / "spark-ext" / "src" / "test" / "resources",
    target := baseDirectory.value / "spark-ext" / "target",
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      "org.scalatest" %% "scalatest" % "3.2.19" % Test
    ),
    scalacOptions ++= Seq("-deprecation", "-feature", "-release:17"),
    Test / fork := true,
    Test / javaOptions ++= Seq("-Xmx2g", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
      "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
      "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED"),
    Test / parallelExecution := false,
    Compile / packageBin / artifactPath := target.value / "lance-spark-compact.jar",
    Compile / packageBin / mappings ++= Seq(
      baseDirectory.value / "LICENSE" -> "META-INF/LICENSE",
      baseDirectory.value / "NOTICE" -> "META-INF/NOTICE"),
    Compile / packageBin / packageOptions += Package.ManifestAttributes(
      "Bundle-License" -> "Apache-2.0",
      "Bundle-Name" -> name.value)
  )

// The option spec the engine validates with also declares the CALL parameters.
Compile / resourceGenerators += Def.task {
  val out = (Compile / resourceManaged).value / "lance_compact" / "parameters.json"
  val spec = baseDirectory.value / "python" / "lance_compact" / "parameters.json"
  // Copied only when it changed: a fresh copy's time stamp made every `sbt package` rewrite the
  // jar, and a process starting Spark meanwhile (a test beside bin/build-wheel) found no jar.
  if (!out.isFile || IO.read(out) != IO.read(spec)) IO.copyFile(spec, out)
  Seq(out)
}.taskValue
