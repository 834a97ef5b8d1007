#!/bin/sh
# Debian's build stores its data under /var/lib/prometheus/metrics2 by default, the
# official image under data/ in its working directory /prometheus (the stack's volume):
# the official default, unless the command names a path itself.
set -eu
case " $* " in
    *" --storage.tsdb.path"*) exec /usr/bin/prometheus "$@" ;;
esac
exec /usr/bin/prometheus --storage.tsdb.path=data/ "$@"
