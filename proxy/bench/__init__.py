"""Live benchmarks over sockets (`cachescout bench ...`)."""
