import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import ai.onnxruntime.providers.NNAPIFlags
import java.nio.{kt_buffer}
import java.util.EnumSet

val env = OrtEnvironment.getEnvironment()
val options = OrtSession.SessionOptions()
// NNAPI takes the nodes it supports; CPU_DISABLED keeps NNAPI's own reference CPU path out, so
// a node no accelerator takes runs on onnxruntime's CPU kernels
options.addNnapi(EnumSet.of(NNAPIFlags.CPU_DISABLED))
{run}
