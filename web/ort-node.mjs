// onnxruntime-node on albert-edge's .onnx and .ort files, as a Node app runs them:
//   node ort-node.mjs REQUEST.json RESPONSE.json
// REQUEST: {"models": [paths], "feeds": {name: {dims, data}}, "threads": n (optional)}.
// RESPONSE: {"runtime", "version", "node", "threads", "results": {path: {inputs, ms, outputs}}}
// (tensors.mjs says how tensors are written). Used by tests/web.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import * as ort from 'onnxruntime-node';

import { runModels } from './tensors.mjs';

const [requestPath, responsePath] = process.argv.slice(2);
if (!requestPath || !responsePath) {
  console.error('usage: node ort-node.mjs REQUEST.json RESPONSE.json');
  process.exit(2);
}
const request = JSON.parse(readFileSync(requestPath, 'utf8'));
const options = request.threads ? { intraOpNumThreads: request.threads, interOpNumThreads: 1 } : {};
const results = await runModels(ort, request, (path) => path, options);
const version = createRequire(import.meta.url)('onnxruntime-node/package.json').version;
writeFileSync(responsePath, JSON.stringify({
  runtime: 'onnxruntime-node', version, node: process.version, threads: request.threads ?? null, results,
}));
