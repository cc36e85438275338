"""Brokers, the broker protocol, replication and controller cores, clients and the CLI."""
