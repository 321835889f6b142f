"""Replay evaluator: policies side by side on workloads and traces, in virtual time.

Kept import-light on purpose: `proxy.sim.replay.runner` pulls in the policy core and the simulated
engine; the report pulls in matplotlib only when plots are asked for.
"""
