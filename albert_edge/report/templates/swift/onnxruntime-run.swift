let tokens: [{swift_type}] = /* token ids, from the tokenizer */
{swift_length}
let inputs: [String: ORTValue] = [
{swift_ort_inputs}
]
let outputs = try session.run(withInputs: inputs, outputNames: ["{first_output}"], runOptions: nil)
let data = try outputs["{first_output}"]!.tensorData()  // outputs: {output_names}
