"""RabbitMQ: the consumer and what serves it (settings, topology, render helper process,
supervisor), and the producers' side (`PromptClient`, dead-letter replay)."""
