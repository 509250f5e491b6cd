"""The decode loops of the worker process: ``decode.py`` runs one generation
(``slots`` = 1), ``batch.py`` steps several in one ``llama_batch`` each step,
with ``generation.py`` (one generation's state in the batch) and ``kv_seqs.py``
(which sequence id, and which KV, a generation takes). Both loops turn tokens
into pieces the same way (``pieces.py``).
"""
