import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import java.nio.{kt_buffer}

val env = OrtEnvironment.getEnvironment()
val options = OrtSession.SessionOptions()
options.setMemoryPatternOptimization(false)  // {mem_pattern}
{run}
