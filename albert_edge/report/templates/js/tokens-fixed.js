const n = {n};  // {pad}
const ids = Array.from({{length: n}}, (_, i) => tokens[i] ?? 0);
const mask = ids.map((_, i) => (i < tokens.length ? 1 : 0)), types = new Array(n).fill(0);
