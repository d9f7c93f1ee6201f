// onnxruntime-node's timing of one file for `albert-edge profile --runtime node`, in a fresh Node
// process per setting:
//   node profile-node.mjs REQUEST.json RESPONSE.json
// REQUEST: {model: path, feeds: {name: {dims, data}}, threads, warmup, runs, min_seconds,
// max_seconds, ci_target}. RESPONSE: profile-loop.mjs's figures with the runtime, its version,
// Node's version and this process's memory at each phase (process.memoryUsage().rss, and the
// peak resident size from process.resourceUsage().maxRSS). The start and end of the timed calls
// are written to standard output as they happen, so the profiler can watch the machine meanwhile.
import { readFileSync, writeFileSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';

import * as ort from 'onnxruntime-node';

import { profileFile } from './profile-loop.mjs';

const [requestPath, responsePath] = process.argv.slice(2);
if (!requestPath || !responsePath) {
  console.error('usage: node profile-node.mjs REQUEST.json RESPONSE.json');
  process.exit(2);
}
const request = JSON.parse(readFileSync(requestPath, 'utf8'));
const memory = {};
const phase = async (name) => {
  if (name === 'timing_start' || name === 'timing_end') {
    writeSync(1, `${JSON.stringify({ mark: name })}\n`);
    return;
  }
  memory[`${name}_rss`] = process.memoryUsage().rss;
  memory[`peak_${name}`] = process.resourceUsage().maxRSS * 1024; // kibibytes on Linux
};
const options = { intraOpNumThreads: request.threads, interOpNumThreads: 1, executionProviders: ['cpu'] };
const result = await profileFile(ort, request, async () => request.model, options, phase);
const version = createRequire(import.meta.url)('onnxruntime-node/package.json').version;
writeFileSync(responsePath, JSON.stringify({
  runtime: 'onnxruntime-node', version, node: process.version, threads: request.threads, memory, ...result,
}));
