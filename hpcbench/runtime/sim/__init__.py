"""The virtual cluster: cost models, a discrete-event engine and the simulate session."""
