const scores = Array.from({scores});
const label = labels[scores.indexOf(Math.max(...scores))];  // the class it scores highest
