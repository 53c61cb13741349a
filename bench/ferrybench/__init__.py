"""ferry's benchmark runner: ferry against Globus GridFTP and the loopback limit, in one run."""
