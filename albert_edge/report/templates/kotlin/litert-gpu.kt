import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel

// {file} is static: every input is [1, {n}], the only shape the GPU accelerator takes
val model = CompiledModel.create(context.assets, "{file}", CompiledModel.Options(Accelerator.GPU))
val tokens: {kt_array} = /* token ids, from the tokenizer */
{length}
val inputs = model.createInputBuffers()  // in the signature's order: {input_names}
{kt_gpu_writes}
val outputs = model.createOutputBuffers()  // in the signature's order: {output_names}
model.run(inputs, outputs)
val {first_output} = outputs[0].readFloat()  // flattened, batch 1
