"""The llama.cpp worker: runs in its own process (``python -m
tierlm.runners.llama_cpp.worker.main``), or in threads of the runner's process
with ``isolation="thread"``.

``main.py`` reads commands; ``service.py`` serves them on one decode thread;
``engine/`` decodes (one generation, or a batch of them); ``loader.py`` opens
the GGUF; ``sampling.py``, ``logprobs.py``, ``snapshots.py`` and
``kv_pool.py`` are what a generation's decode uses. Only this room loads
llama.cpp contexts; it talks to the runner only through ``wire/``.
"""
