"""Ollama's native API (``/api/*``), served beside ``/v1`` by the same gateway:
``routes`` (the endpoints), ``schemas`` (its requests), ``translate`` (each as
the OpenAI request it means), ``answers`` and ``streaming`` (its NDJSON
answers), ``models`` (tags, ps, show, load and unload)."""
