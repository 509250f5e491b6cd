"""The decode engine of the worker process: ``batch.py`` steps the running
generations, any number from one to ``slots``, in one ``llama_batch`` each
step (the plan of a step: ``step_plan.py``), with ``generation.py`` (one
generation's state), ``kv_slots.py`` (which KV slot, and which KV, a
generation takes) and ``pieces.py`` (its tokens as pieces of text).
"""
