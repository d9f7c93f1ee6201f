val ids = tokens; val n = ids.size  // [CLS] and [SEP] included{bound}
val mask = {kt_array}(n) {{ 1 }}; val types = {kt_array}(n)
