val session = env.createSession(modelBytes, options)  // {file}, read from the app's assets
val tokens: {kt_array} = /* token ids, from the tokenizer */
{length}
val inputs = mapOf(
{kt_ort_inputs}
)
session.run(inputs).use {{ result ->
    val {first_output} = result.get("{first_output}").get().value  // outputs: {output_names}
}}
