import {{ FilesetResolver, {task} }} from "@mediapipe/tasks-text";
// a bundler (Vite, webpack) resolves "@mediapipe/tasks-text"; a page without one maps it in an import map:
// <script type="importmap">{{"imports": {{"@mediapipe/tasks-text":
//   "/node_modules/@mediapipe/tasks-text/text_bundle.mjs"}}}}</script>

// the WebAssembly, served beside the app: a copy of node_modules/@mediapipe/tasks-text/wasm
const fileset = await FilesetResolver.forTextTasks("wasm");
const task = await {task}.createFromOptions(fileset, {{ baseOptions: {{ modelAssetPath: "{file}" }} }});
const text = {js_text};
const result = task.{js_call}(text);  // a string in
{js_read}
