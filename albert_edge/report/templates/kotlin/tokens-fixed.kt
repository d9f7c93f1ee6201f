val n = {n}  // {pad}
val ids = tokens.copyOf(n); val types = {kt_array}(n)
val mask = {kt_array}(n) {{ if (it < tokens.size) 1 else 0 }}
