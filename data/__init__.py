"""The checkout's prompt-set builders and training data (see README.md), kept out of the wheel.

Run from the checkout's root, e.g. ``python -m data.build_prompts``; `redrafter train` reads the
training splits here through ``redrafter_mlx.formats.prompt_sets.load_prompts``.
"""
