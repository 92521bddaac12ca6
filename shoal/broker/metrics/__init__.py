"""Operations: counters kept by the broker, their Prometheus names, the collector, the HTTP listener."""
