"""albert_edge.quantize"""
