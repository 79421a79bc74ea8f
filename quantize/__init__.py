"""Quantization of LLMs and drafters (installed as redrafter_mlx.quantize)."""
