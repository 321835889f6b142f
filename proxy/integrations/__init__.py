"""Client-side helpers for agent runtimes: send CacheScout hints (`hints_client`, no dependencies
beyond httpx) and framework bindings (`langgraph`: needs the optional `langgraph` extra)."""
