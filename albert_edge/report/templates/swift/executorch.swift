import ExecuTorch

let module = Module(filePath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!)
let tokens: [{swift_type}] = /* token ids, from the tokenizer */
{swift_length}
// inputs by position: {input_names}
let outputs = try module.forward([{swift_pte_inputs}])
let {first_output}: Tensor<Float> = outputs[0].tensor()!  // outputs in order: {output_names}
