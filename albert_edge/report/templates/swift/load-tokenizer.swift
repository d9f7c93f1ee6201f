// {note}
let spiece = try Data(contentsOf: Bundle.main.url(forResource: "{stem}", withExtension: "{ext}")!)
