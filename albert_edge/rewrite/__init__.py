"""albert_edge.rewrite: rewrites of exported graphs that the converters and quantize both apply
(build side: needs the ``onnx`` package). Neither package owns them, so the build packages keep
pointing one way: converters may call quantize, quantize never imports converters.

- :mod:`.initializers`: drop initializers nothing reads.
- :mod:`.onnx_fuse`: each self-attention as one onnxruntime MultiHeadAttention node, weights untouched.
"""
