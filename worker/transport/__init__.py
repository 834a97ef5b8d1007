"""RabbitMQ, in four rooms and the settings they share.

* `link`: connections round a cluster's addresses, TLS, the topology, what a broker
  failure means, how a blocked or silent connection is noticed (all on aiormq);
* `consumer`: the worker's link kept up and one delivery's path to a reply and a
  settlement (acknowledgements, in-flight bounds, refused replies, readiness);
* `processes`: where a render runs (the helper process, its deadline) and the
  supervisor of `serve --processes N`;
* `producers`: `PromptClient`, its own link, and replaying dead letters.

`settings` (with `setting_flags`) is serve's one typed settings object, `retry` the one
backoff, `event_loop` picks the asyncio loop. `consumer` stands on `link` and `processes`, `producers` on
`link`; `link` and `processes` stand on neither (tests/test_architecture.py).
"""
