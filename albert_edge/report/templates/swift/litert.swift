import TensorFlowLite

let interpreter = try Interpreter(modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!)
let runner = try interpreter.signatureRunner(with: "serving_default")  // inputs and outputs by name
let tokens: [{swift_type}] = /* token ids, from the tokenizer */
{swift_length}
{swift_litert_resize}
try runner.allocateTensors()
try runner.invoke(with: [
{swift_litert_inputs}
])
let {first_output} = try runner.output(named: "{first_output}")  // outputs: {output_names}
