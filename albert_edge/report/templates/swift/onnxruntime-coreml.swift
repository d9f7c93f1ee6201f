import onnxruntime_objc

let env = try ORTEnv(loggingLevel: .warning)
let options = try ORTSessionOptions()
let coreML = ORTCoreMLExecutionProviderOptions()
coreML.createMLProgram = true  // the MLProgram form, the one the report's table counts
coreML.onlyAllowStaticInputShapes = true  // {file} is static: [1, {n}]
try options.appendCoreMLExecutionProvider(with: coreML)
let session = try ORTSession(env: env, modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!,
                             sessionOptions: options)
{run}
