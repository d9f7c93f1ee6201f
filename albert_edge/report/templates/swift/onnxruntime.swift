import onnxruntime_objc

let env = try ORTEnv(loggingLevel: .warning)
// onnxruntime-objc has no switch for the memory pattern that Kotlin and JS turn off here
let session = try ORTSession(env: env, modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!,
                             sessionOptions: nil)
let tokens: [{swift_type}] = /* token ids, from the tokenizer */
{swift_length}
let inputs: [String: ORTValue] = [
{swift_ort_inputs}
]
let outputs = try session.run(withInputs: inputs, outputNames: ["{first_output}"], runOptions: nil)
let data = try outputs["{first_output}"]!.tensorData()  // outputs: {output_names}
