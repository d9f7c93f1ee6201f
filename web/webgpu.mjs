// WebGPU as a page sees it, and onnxruntime-web's own word on where each node of a model ran: the
// adapter (vendor, architecture, whether it is a fallback, i.e. software, adapter, and its features:
// "shader-f16" decides whether float16 kernels exist), and the node placement that onnxruntime logs
// at verbose level when a session is created, read from the console lines the page captures.

/** The adapter `navigator.gpu.requestAdapter()` gives, described; null where this browser has none. */
export async function adapterInfo() {
  if (!navigator.gpu) return null;
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return null;
  const info = adapter.info ?? {};
  return {
    vendor: info.vendor ?? '', architecture: info.architecture ?? '', device: info.device ?? '',
    description: info.description ?? '', fallback: Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter),
    features: [...adapter.features].sort(),
  };
}

/** Every console line from now on, kept (onnxruntime-web writes its logs to the console). */
export function captureConsole() {
  const lines = [];
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    const original = console[level].bind(console);
    console[level] = (...args) => {
      lines.push(args.map((a) => (typeof a === 'string' ? a : String(a))).join(' '));
      original(...args);
    };
  }
  return lines;
}

/** The node placement in onnxruntime's verbose log lines since `from`: {provider: [node op types]}. */
export function placement(lines, from = 0) {
  const placed = {};
  let provider = null;
  for (const line of lines.slice(from)) {
    const head = line.match(/(?:All nodes placed on|Node\(s\) placed on) \[(\w+)\]/);
    if (head) {
      provider = head[1];
      placed[provider] ??= [];
      const all = line.match(/All nodes placed on \[\w+\]\. Number of nodes: (\d+)/);
      if (all) placed[provider].push(`all ${all[1]} nodes`);
      continue;
    }
    const node = provider && line.match(/^\s*(?:.*\]\s*)?\s*(\w+) \(([^)]*)\)\s*$/);
    if (node) placed[provider].push(node[1]);
  }
  return placed;
}
