"""What the benchmarks share: where results go (``results``), llama.cpp's raw
batched decode rate (``batch_raw``), and the helpers of the two benchmarks too
big for one file, ``gateway_load.py`` (``gateway/``) and ``real_model.py``
(``real/``). A benchmark is a script of ``bench/`` (``python bench/NAME.py``
or ``tierlm bench NAME``); nothing here runs on its own.
"""
