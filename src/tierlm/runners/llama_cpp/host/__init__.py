"""The runner's side of llama.cpp: runs in the caller's process (the gateway's).

``LlamaCppRunner`` (``runner.py``) starts its worker (``transport.py``: a child
process, or threads here with ``isolation="thread"``), replaces it when it
dies (``supervisor.py``), matches the worker's events to the calls waiting
for them (``calls.py``) and hands each generation in flight one of its
``slots`` (``slots.py``). It talks to the worker only through ``wire/``;
it never loads llama.cpp itself.
"""
