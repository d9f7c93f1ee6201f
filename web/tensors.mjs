// Tensors as JSON, the same in Node and in the browser: a request's integer feeds as plain arrays
// (`{dims, data}`), each output as its float32 bytes in base64 (`{dims, dtype, base64}`), so
// Python reads back exactly the numbers the runtime computed (a decimal round trip would not).

/** The feeds of `request.feeds` as onnxruntime tensors: int64 ids, mask and token types. */
export function feedsOf(ort, feeds) {
  const out = {};
  for (const [name, { dims, data }] of Object.entries(feeds)) {
    out[name] = new ort.Tensor('int64', BigInt64Array.from(data, BigInt), dims);
  }
  return out;
}

/** A float32 array (or an onnxruntime tensor's data) as base64 of its little-endian bytes. */
export function base64Of(floats) {
  const bytes = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

export function tensorJson(tensor) {
  if (tensor.type !== 'float32') {
    throw new Error(`output of type ${tensor.type}: only float32 outputs are sent back`);
  }
  return { dims: Array.from(tensor.dims), dtype: 'float32', base64: base64Of(tensor.data) };
}

/** Every file of `request.models` run on `request.feeds` in one `InferenceSession` each; `open(path)`
 *  gives what `InferenceSession.create` takes for it (a path in Node, bytes in the browser). */
export async function runModels(ort, request, open, sessionOptions = {}) {
  const feeds = feedsOf(ort, request.feeds);
  const results = {};
  for (const path of request.models) {
    const session = await ort.InferenceSession.create(await open(path), sessionOptions);
    const t0 = performance.now();
    const outputs = await session.run(feeds);
    const ms = performance.now() - t0;
    results[path] = { inputs: session.inputNames, ms, outputs: {} };
    for (const name of session.outputNames) {
      results[path].outputs[name] = tensorJson(outputs[name]);
    }
    await session.release();
  }
  return results;
}
