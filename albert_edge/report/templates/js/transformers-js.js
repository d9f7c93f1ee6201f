import {{ env, pipeline }} from "@huggingface/transformers";
// a bundler (Vite, webpack) resolves "@huggingface/transformers"; a page without one maps it in an import map:
// <script type="importmap">{{"imports": {{"@huggingface/transformers":
//   "/node_modules/@huggingface/transformers/dist/transformers.web.js"}}}}</script>

env.localModelPath = "./";  // where {folder}/ is: beside the page in a browser, the working directory in Node
env.allowRemoteModels = false;  // its own files, nothing from the Hugging Face Hub
const device = {device};  // {device_note}
const dtype = {dtype};  // {dtype_note}{other_dtypes}
const {call} = await pipeline("{task}", "{folder}", {{ device, dtype }});
{read}
