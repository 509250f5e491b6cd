"""``real_model.py``'s parts: the sections run on SmolLM2 and on a large model."""
