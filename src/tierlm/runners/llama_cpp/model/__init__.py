"""What a model is and how big the device is, read without loading it.

A model id's GGUF and load options (``spec.py``), its KV size from the GGUF
header (``gguf_header.py``), the CPU flags that decide load options
(``cpu_flags.py``), the slot count and step cost (``capacity.py``), and the
embedded default model (``default_model.py``). Plain data and files: used by
the runner's process and the worker's alike.
"""
