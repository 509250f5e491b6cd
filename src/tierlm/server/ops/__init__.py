"""What an operator uses: the scheduler API (foreground, state, pause), health
and readiness, the live dashboard and the OpenAPI document.
"""
