import org.tensorflow.lite.Interpreter

val interpreter = Interpreter(modelBuffer)  // {file}, memory-mapped from the app's assets
val tokens: {kt_array} = /* token ids, from the tokenizer */
{length}
val inputs = mapOf<String, Any>(
{kt_litert_inputs}
)
val outputs = mapOf<String, Any>(
{kt_litert_outputs}
)
// runSignature resizes the inputs to (1, n) itself; with runForMultipleInputsOutputs call
// interpreter.resizeInput(i, intArrayOf(1, n)) for each input first.
interpreter.runSignature(inputs, outputs, "serving_default")
