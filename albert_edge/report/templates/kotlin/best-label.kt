val scores = {scores}
val label = labels[scores.indices.maxBy {{ scores[it] }}]  // the class it scores highest
