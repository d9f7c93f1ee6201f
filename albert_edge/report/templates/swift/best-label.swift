let scores: [Float] = {scores}
let label = labels[scores.indices.max {{ scores[$0] < scores[$1] }}!]  // the class it scores highest
