"""A request's text and grammar as the model takes them: the chat template's
tools (``chat_format.py``), message text kept literal (``literal_text.py``),
and the GBNF grammar of structured output and tool calls (``grammars.py``,
``schema_keywords.py``), with its bounds known before it is built
(``grammar_bounds.py``: the host checks them too). Pure text; the worker
applies it.
"""
