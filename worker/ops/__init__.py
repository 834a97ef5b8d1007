"""What operators see of a running worker: structured logs, Prometheus metrics, and the
HTTP server for health probes and scraping."""
