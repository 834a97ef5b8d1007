"""The broker link every part of the worker stands on: `serve`'s own AMQP connection
(`amqp`), connections round a cluster's addresses, TLS, the topology, what a broker
failure means, how a blocked connection is noticed, and the AMQP frame codec."""
