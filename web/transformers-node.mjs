// transformers.js (@huggingface/transformers) in Node on a `convert --to transformers-js` folder, as
// a JavaScript app loads it: local files only, nothing fetched.
//   node transformers-node.mjs REQUEST.json RESPONSE.json
// REQUEST: {"folder": path, "task": "text-classification" | "feature-extraction" | "fill-mask", "texts": [...],
//           "dtype": "fp32" (optional: the file transformers.js picks, as in its own options)}.
// RESPONSE: {"runtime", "version", "ids": [[...] per text, as its tokenizer gives them],
//            "labels": [...] and "scores" (text-classification: every label's probability, in label order)
//            or "vectors" (feature-extraction: the mean-pooled embedding) or "tokens" and "scores"
//            (fill-mask: the top 5 tokens for the [MASK] and their probabilities)}; tensors as tensors.mjs writes them.
import { readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';

import { env, pipeline } from '@huggingface/transformers';

import { base64Of } from './tensors.mjs';

const [requestPath, responsePath] = process.argv.slice(2);
if (!requestPath || !responsePath) {
  console.error('usage: node transformers-node.mjs REQUEST.json RESPONSE.json');
  process.exit(2);
}
const request = JSON.parse(readFileSync(requestPath, 'utf8'));
const folder = resolve(request.folder);
env.allowRemoteModels = false;
env.localModelPath = dirname(folder);
const pipe = await pipeline(request.task, basename(folder), { dtype: request.dtype ?? 'fp32', local_files_only: true });
if (typeof pipe.tokenizer !== 'function') {
  console.error(`${folder}: transformers.js loaded no tokenizer (tokenizer.json and tokenizer_config.json)`);
  process.exit(1);
}
const ids = request.texts.map((text) => Array.from(pipe.tokenizer(text).input_ids.data, Number));
const response = { runtime: 'transformers.js', version: env.version, ids };
if (request.task === 'text-classification') {
  const labels = Object.entries(pipe.model.config.id2label).sort((a, b) => a[0] - b[0]).map(([, name]) => name);
  const scores = new Float32Array(request.texts.length * labels.length);
  for (const [row, text] of request.texts.entries()) {
    for (const { label, score } of await pipe(text, { top_k: null })) {
      scores[row * labels.length + labels.indexOf(label)] = score;
    }
  }
  response.labels = labels;
  response.scores = { dims: [request.texts.length, labels.length], dtype: 'float32', base64: base64Of(scores) };
} else if (request.task === 'fill-mask') {
  // The top 5 tokens for each text's one [MASK], and their probabilities (as transformers-page.mjs).
  const top = [];
  for (const text of request.texts) top.push(await pipe(text, { top_k: 5 }));
  response.tokens = top.map((t) => t.map(({ token }) => token));
  const scores = Float32Array.from(top.flat().map(({ score }) => score));
  response.scores = { dims: [request.texts.length, 5], dtype: 'float32', base64: base64Of(scores) };
} else {
  const out = await pipe(request.texts, { pooling: 'mean' });
  response.vectors = { dims: Array.from(out.dims), dtype: 'float32', base64: base64Of(out.data) };
}
writeFileSync(responsePath, JSON.stringify(response));
