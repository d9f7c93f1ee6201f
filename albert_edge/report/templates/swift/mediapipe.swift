import MediaPipeTasksText

let task = try {task}(modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!)
let text: String = {js_text}
let result = try task.{swift_call}(text: text)  // a string in
{swift_read}
