import com.google.mediapipe.tasks.text.{task_package}.{task}

val task = {task}.createFromFile(context, "{file}")  // from the app's assets
val text: String = {js_text}
val result = task.{kt_call}(text)  // a string in: the tokenizer is inside the file
{kt_read}
