"""tierlm: share one inference device between a person chatting and background work."""

__version__ = "0.1.0"
