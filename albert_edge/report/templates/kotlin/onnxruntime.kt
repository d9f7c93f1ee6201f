import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import java.nio.{kt_buffer}

val env = OrtEnvironment.getEnvironment()
val options = OrtSession.SessionOptions()
options.setMemoryPatternOptimization(false)  // {mem_pattern}
val session = env.createSession(modelBytes, options)  // {file}, read from the app's assets
val tokens: {kt_array} = /* token ids, from the tokenizer */
{length}
val inputs = mapOf(
{kt_ort_inputs}
)
session.run(inputs).use {{ result ->
    val {first_output} = result.get("{first_output}").get().value  // outputs: {output_names}
}}
