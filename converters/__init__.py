"""albert_edge.converters"""
