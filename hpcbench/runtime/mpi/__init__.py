"""A run under real MPI: the session on every rank, the driver of a rank's program, where ranks compute,
injected faults and start-up self-checks."""
