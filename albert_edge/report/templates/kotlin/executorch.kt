import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor

val module = Module.load(filesDir.resolve("{file}").path)  // a file path: copy it out of the assets first
val tokens: {kt_array} = /* token ids, from the tokenizer */
{length}
// inputs by position: {input_names}
val outputs = module.forward({kt_pte_inputs})
val {first_output} = outputs[0].toTensor().dataAsFloatArray  // outputs in order: {output_names}
