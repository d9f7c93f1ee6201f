let ids = tokens; let n = ids.count  // [CLS] and [SEP] included{bound}
let mask = [{swift_type}](repeating: 1, count: n); let types = [{swift_type}](repeating: 0, count: n)
