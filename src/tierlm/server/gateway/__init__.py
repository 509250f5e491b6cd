"""The gateway's state: one runner, one Scheduler, and the requests' jobs.

``Gateway`` owns them; around it, per-class and per-key admission, a request's
scheduling metadata (keys, ``X-Tierlm-*`` headers), keep-alive unloads, the
drain, the live change feed, recent jobs, the timeline, Prometheus metrics and
the embedding lane as the app runs it. Knows no OpenAI shapes.
"""
