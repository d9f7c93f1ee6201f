// What the test pages share: reading the request named in the page's address, showing progress
// and the result on the page (so a screenshot shows what ran), and handing the result to the test
// that drives the browser, which waits for `window.albertEdge.done`.

export const state = { done: false, error: null, result: null };
window.albertEdge = state;

// Web Workers started by the page (a threaded WebAssembly runtime starts one per extra thread):
// counted, so a page shows whether its threads were real, not only the number it asked for.
export const workers = { started: 0 };
window.Worker = class extends window.Worker {
  constructor(...args) {
    super(...args);
    workers.started += 1;
  }
};

export function say(text) {
  document.getElementById('status').textContent = text;
}

/** The request JSON at the URL given as ?request=... */
export async function request() {
  const url = new URLSearchParams(location.search).get('request');
  if (!url) throw new Error('no ?request=URL in the page address');
  return (await fetch(url)).json();
}

/** The .wasm files this page fetched (which build of a runtime ran: SIMD or not, threaded or not). */
export function wasmFetched() {
  const paths = performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname);
  return [...new Set(paths.filter((p) => p.endsWith('.wasm')).map((p) => p.split('/').pop()))];
}

/** Whether this browser takes WebAssembly SIMD: a module with one v128 function validates only then. */
export function simdSupported() {
  return WebAssembly.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0,
    10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]));
}

/** One row per entry of `rows` (arrays of cells) under `header`, in the page's table. */
export function table(header, rows) {
  const t = document.getElementById('result');
  t.replaceChildren();
  for (const [i, cells] of [header, ...rows].entries()) {
    const tr = t.insertRow();
    for (const cell of cells) {
      const td = document.createElement(i === 0 ? 'th' : 'td');
      td.textContent = String(cell);
      tr.appendChild(td);
    }
  }
}

/** Run `body()`; its value becomes the result, an error is shown and handed over as text. */
export async function main(body) {
  try {
    state.result = await body();
  } catch (err) {
    state.error = `${err && err.stack ? err.stack : err}`;
    say(`failed: ${err}`);
  } finally {
    state.done = true;
  }
}
