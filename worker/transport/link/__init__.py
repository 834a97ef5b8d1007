"""The broker link every part of the worker stands on, on aiormq's public API:
connections round a cluster's addresses, TLS, the topology, what a broker failure
means, and how a blocked or silent connection is noticed."""
