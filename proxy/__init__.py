"""CacheScout: a sidecar proxy that learns which agent runs next and keeps its prefix cache warm."""

__version__ = "0.1.0"
