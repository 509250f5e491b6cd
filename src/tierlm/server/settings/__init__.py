"""The gateway's settings, declared once (docs/gateway.md "Configuration").

The lowest floor of the gateway: pydantic models of the TOML file's sections
(``sections``), where they are read from (``sources``: TOML, ``TIERLM_*``,
flags), the flags and the config reference generated from them, the shared
schema vocabulary and its error messages, access (classes and keys), the
embedders and the backends. Imports nothing else of ``tierlm.server``.
"""
