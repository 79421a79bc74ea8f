"""`redrafter serve`: the OpenAI-compatible server (`app.py`) over the batching worker (`engine.py`)."""
