"""Kafka's group coordinator as pure cores (no I/O, no clock): ``assignors`` (KIP-848's
server-side ``uniform`` and ``range``), ``consumer`` (KIP-848 consumer groups)."""
