package io.github.lancecompact.spark.engine

import org.scalatest.funsuite.AnyFunSuite

/** What a dead worker's statement committed before it died, as the caller reads it. */
class LandedTextSuite extends AnyFunSuite {
  test("commits' versions read as one phrase") {
    assert(EngineProcess.landedText(Seq("version 5")) == "version 5")
    assert(EngineProcess.landedText(Seq("version 5", "version 7")) == "versions 5 and 7")
    assert(EngineProcess.landedText(Seq("versions 5, 6", "version 9")) == "versions 5, 6 and 9")
    assert(EngineProcess.landedText(Seq("version 5", "an index")) == "version 5, an index")
  }
}
