"""What every HTTP request passes on its way in and out, before any endpoint.

Starlette's middleware shape: the request id, OpenAI-format errors, the guards
against web pages, body size and time limits, reading a JSON body, noticing a
client that left, uvicorn's configuration and the logs. Imports only
``tierlm.server.settings`` of the gateway.
"""
