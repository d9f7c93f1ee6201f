let labels = try JSONDecoder().decode(  // labels[i] names class i
    [String].self, from: Data(contentsOf: Bundle.main.url(forResource: "{stem}", withExtension: "{ext}")!))
