"""Helpers that run servers for tests, the demo and benchmarks: in-thread uvicorn, child processes, a
sim engine or a proxy on a loopback socket, a router fleet, and the multi-agent client workload
(`workload.py`) they drive.
"""
