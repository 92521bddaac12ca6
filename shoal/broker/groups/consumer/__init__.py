"""Consumer groups of the KIP-848 protocol: the sans-IO group, its assignors, records and service."""
