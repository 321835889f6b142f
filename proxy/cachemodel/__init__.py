"""The engine's cache model: block hashes, the block pool (vLLM rules, priority mode), the host-memory
tier, the cost model. Shared by the simulated engine and the replay.
"""
