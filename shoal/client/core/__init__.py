"""What every client shares: broker connections, the cluster picture, settings, errors,
retries and backoff, and records as the application sees them.
"""
