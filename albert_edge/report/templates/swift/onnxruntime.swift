import onnxruntime_objc

let env = try ORTEnv(loggingLevel: .warning)
// onnxruntime-objc has no switch for the memory pattern that Kotlin and JS turn off here
let session = try ORTSession(env: env, modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!,
                             sessionOptions: nil)
{run}
