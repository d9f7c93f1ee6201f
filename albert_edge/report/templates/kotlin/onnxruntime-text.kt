import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import ai.onnxruntime.extensions.OrtxPackage

val env = OrtEnvironment.getEnvironment()
val options = OrtSession.SessionOptions()
options.registerCustomOpLibrary(OrtxPackage.getLibraryPath())  // the tokenizer node's library
options.setMemoryPatternOptimization(false)  // {mem_pattern}
val session = env.createSession(modelBytes, options)  // {file}, read from the app's assets
val input = OnnxTensor.createTensor(env, arrayOf(text), longArrayOf(1))  // one string per call
session.run(mapOf("text" to input)).use {{ result ->
    val {first_output} = result.get("{first_output}").get().value  // outputs: {output_names}
}}
