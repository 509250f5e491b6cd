"""The OpenAI-compatible API: request models, answers and streams in OpenAI's
shapes, tool calls, and the routes of ``/v1/chat/completions``,
``/v1/completions``, ``/v1/models`` and ``/v1/embeddings``.
"""
