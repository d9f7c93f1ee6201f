import * as ort from "onnxruntime-web";
// a bundler (Vite, webpack) resolves "onnxruntime-web"; a page without one maps it in an import map:
// <script type="importmap">{{"imports": {{"onnxruntime-web":
//   "/node_modules/onnxruntime-web/dist/ort.bundle.min.mjs"}}}}</script>
// (it fetches its .wasm from beside that file: serve the package's dist/ folder whole)

const session = await ort.InferenceSession.create("{file}", {{
  executionProviders: [{js_devices}],  // {js_device_note}
  enableMemPattern: false,  // {mem_pattern}
}});
const tokens = /* token ids, from the tokenizer */;
{js_length}
const outputs = await session.run({{
{js_ort_inputs}
}});
const {first_output} = outputs.{first_output}.data;  // outputs: {output_names}
