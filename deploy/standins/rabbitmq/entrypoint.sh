#!/bin/sh
# Run the broker in the foreground as PID 1's child-free replacement (exec), reading the
# conf.d directory the official image reads, so the stack's mounts work unchanged.
set -eu
export RABBITMQ_CONFIG_FILES=/etc/rabbitmq/conf.d
exec /usr/lib/rabbitmq/bin/rabbitmq-server "$@"
