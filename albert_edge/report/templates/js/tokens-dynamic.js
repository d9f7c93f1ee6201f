const ids = tokens, n = ids.length;  // [CLS] and [SEP] included{bound}
const mask = new Array(n).fill(1), types = new Array(n).fill(0);
