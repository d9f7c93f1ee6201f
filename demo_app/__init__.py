"""The Raspberry Pi demo (installed as ``albert_edge.demo``): device side only."""
