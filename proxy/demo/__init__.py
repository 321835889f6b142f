"""`cachescout demo`: the simulated engine, the proxy and a multi-agent workload, direct vs through the proxy."""
