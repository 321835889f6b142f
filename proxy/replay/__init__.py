"""Replay evaluator: workloads, trace loaders, policies side by side in virtual time (`cachescout
replay`).

Kept import-light on purpose: `proxy.replay.runner` pulls in the policy core and the cache model;
the report pulls in matplotlib only when plots are asked for.
"""
