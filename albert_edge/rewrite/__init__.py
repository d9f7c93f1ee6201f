"""albert_edge.rewrite: rewrites of exported graphs that the converters and quantize both apply
(build side: needs the ``onnx`` package). Neither package owns them, so the build packages keep
pointing one way: converters may call quantize, quantize never imports converters.

- :mod:`.passes`: a rewrite as a named pass, and the one function that applies a recipe's list in order.
- :mod:`.initializers`: drop initializers nothing reads.
- :mod:`.onnx_fuse`: each self-attention as one onnxruntime MultiHeadAttention node, weights untouched.
"""
