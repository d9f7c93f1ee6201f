let n = {n}  // {pad}
let ids = tokens + [{swift_type}](repeating: 0, count: n - tokens.count)
let mask = (0..<n).map {{ {swift_type}($0 < tokens.count ? 1 : 0) }}; let types = [{swift_type}](repeating: 0, count: n)
