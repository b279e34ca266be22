"""Model cards and shipped probes (installed as the data package ``acute._cards``)."""
