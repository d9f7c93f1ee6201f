// transformers.js (@huggingface/transformers) in the browser on `convert --to transformers-js`
// folders, as a web app loads them: its browser build and onnxruntime-web's WebAssembly from this
// server, the model folders from this server's /files/, remote models off. transformers-web.html
// maps the bare names the browser build imports to their files in node_modules and calls `run`.
//
// REQUEST (?request=URL): {"jobs": [{"name", "folder": URL of a model folder, "task":
//   "text-classification" | "feature-extraction" | "fill-mask", "dtype": "fp32" | "q8", "texts": [...]}]}
// RESULT: {"runtime", "version", "wasm", "origins", "jobs": {name: answer}}, each answer as
// web/transformers-node.mjs gives it for the task: "ids" per text; "labels" and "scores" (every
// label's probability, in label order), "vectors" (the mean-pooled embedding) or "tokens" and
// "scores" (fill-mask: the TOP_K tokens for the [MASK] and their probabilities). Texts run one per
// call, as an app calls a pipeline, so no padding reaches the int8 file's dynamic ranges.
import { env, pipeline } from '@huggingface/transformers';

import { main, request, say, table, wasmFetched } from '/page.mjs';
import { base64Of } from '/tensors.mjs';

// The onnxruntime-web that transformers.js bundles is its own pinned build: its .wasm files must be
// the ones beside it (by default it fetches them from a CDN).
const WASM = '/node_modules/@huggingface/transformers/node_modules/onnxruntime-web/dist/';
export const TOP_K = 5;

env.allowRemoteModels = false;
env.allowLocalModels = true;
env.useBrowserCache = false;
env.backends.onnx.wasm.wasmPaths = new URL(WASM, location.href).href;

function floats(rows, width, values) {
  return { dims: [rows, width], dtype: 'float32', base64: base64Of(Float32Array.from(values)) };
}

/** One job's answer: every text through `pipeline(task)` of the folder at `job.folder`. */
export async function answer(job) {
  const url = new URL(job.folder, location.href);
  const parts = url.pathname.replace(/\/$/, '').split('/');
  const name = parts.pop();
  // A path on this server, not a URL: transformers.js looks for optional files (tokenizer_config.json)
  // under localModelPath only when it is not a URL, and finds no tokenizer otherwise.
  env.localModelPath = `${parts.join('/')}/`;
  const pipe = await pipeline(job.task, name, { dtype: job.dtype, local_files_only: true, device: job.device ?? 'wasm' });
  const ids = job.texts.map((text) => Array.from(pipe.tokenizer(text).input_ids.data, Number));
  const out = { ids };
  if (job.task === 'text-classification') {
    const labels = Object.entries(pipe.model.config.id2label).sort((a, b) => a[0] - b[0]).map(([, n]) => n);
    const scores = new Array(job.texts.length * labels.length).fill(NaN);
    for (const [row, text] of job.texts.entries()) {
      for (const { label, score } of await pipe(text, { top_k: null })) {
        scores[row * labels.length + labels.indexOf(label)] = score;
      }
    }
    Object.assign(out, { labels, scores: floats(job.texts.length, labels.length, scores) });
  } else if (job.task === 'feature-extraction') {
    const vectors = [];
    for (const text of job.texts) vectors.push(...(await pipe(text, { pooling: 'mean' })).data);
    out.vectors = floats(job.texts.length, vectors.length / job.texts.length, vectors);
  } else if (job.task === 'fill-mask') {
    const tokens = [];
    const scores = [];
    for (const text of job.texts) {
      const top = await pipe(text, { top_k: TOP_K });
      tokens.push(top.map((t) => t.token));
      scores.push(...top.map((t) => t.score));
    }
    Object.assign(out, { tokens, scores: floats(job.texts.length, TOP_K, scores) });
  } else {
    throw new Error(`task ${job.task}: this page runs text-classification, feature-extraction and fill-mask`);
  }
  await pipe.dispose();
  return out;
}

export function run() {
  main(async () => {
    const req = await request();
    const jobs = {};
    const rows = [];
    for (const job of req.jobs) {
      say(`running ${job.name}: ${job.task} (${job.dtype}) on ${job.texts.length} texts…`);
      const t0 = performance.now();
      jobs[job.name] = await answer(job);
      rows.push([job.name, job.task, job.dtype, job.texts.length, ((performance.now() - t0) / 1000).toFixed(1)]);
      table(['job', 'pipeline', 'dtype', 'texts', 's'], rows);
    }
    // Every address this page fetched (the test checks that none is off this server).
    const origins = [...new Set(performance.getEntriesByType('resource').map((e) => new URL(e.name).origin))];
    const wasm = wasmFetched();
    document.getElementById('env').textContent = `transformers.js ${env.version}, onnxruntime-web `
      + `${env.backends.onnx.versions?.web} (${wasm.join(', ')}), fetched from ${origins.join(', ')}`;
    say(`done: ${req.jobs.length} pipelines ran`);
    return { runtime: 'transformers.js', version: env.version, ortWeb: env.backends.onnx.versions?.web, wasm,
             origins, jobs };
  });
}
