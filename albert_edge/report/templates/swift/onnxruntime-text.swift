import onnxruntime_objc
import onnxruntime_extensions

let env = try ORTEnv(loggingLevel: .warning)
let options = try ORTSessionOptions()
try options.registerCustomOps(functionPointer: OrtExt.getRegisterCustomOpsFunctionPointer())
let session = try ORTSession(env: env, modelPath: Bundle.main.path(forResource: "{stem}", ofType: "{suffix}")!,
                             sessionOptions: options)
let input = try ORTValue(tensorStringData: [text], shape: [1])  // one string per call
let outputs = try session.run(withInputs: ["text": input], outputNames: ["{first_output}"], runOptions: nil)
let data = try outputs["{first_output}"]!.tensorData()  // outputs: {output_names}
