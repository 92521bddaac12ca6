#!/bin/sh
# Shoal broker container entrypoint.
#
# Turns environment variables into broker settings, then execs the broker so
# it is PID 1's program itself and receives SIGTERM from `docker stop`
# directly (the broker shuts down cleanly on SIGTERM; a wrapper shell would
# swallow the signal and get the broker SIGKILLed after the grace period).
#
#   SHOAL_DATA_DIR              log.dirs               (default /var/lib/shoal/data)
#   SHOAL_LISTENERS             listeners              (default PLAINTEXT://0.0.0.0:9092)
#   SHOAL_ADVERTISED_LISTENERS  advertised.listeners   (default: the listeners with a wildcard host
#                               (0.0.0.0 or empty) named localhost, as Kafka's image advertises
#                               PLAINTEXT://localhost:9092, so `docker run -p 9092:9092` works from
#                               the host; containers elsewhere need the name they reach it by)
#   SHOAL_HTTP_LISTENERS        shoal.http.listeners   (default: the broker's, http://127.0.0.1:9644;
#                               http://0.0.0.0:9644 lets Prometheus in another container scrape)
#   SHOAL_HEALTHCHECK_ADDRESS   where the image's healthcheck sends ApiVersions (default 127.0.0.1:9092)
#   SHOAL_HEALTHCHECK_HTTP_ADDRESS  where it asks /health/ready (default 127.0.0.1:9644; empty: not asked)
#   SHOAL_CONFIG_FILE           --config FILE          (a Kafka-style .properties file)
#   SHOAL_CFG_<NAME>            any setting: SHOAL_CFG_NUM_PARTITIONS=3 -> num.partitions=3
#                               (lower-cased, '_' becomes '.')
#
# Arguments are passed on to the broker after these and win over them:
#   docker run shoal --override log.level=DEBUG
set -eu

data_dir="${SHOAL_DATA_DIR:-/var/lib/shoal/data}"
mkdir -p "$data_dir"

# Prepend, in reverse order of precedence, so that the caller's own arguments
# stay last and beat everything set here.
for var in $(env | sed -n 's/^\(SHOAL_CFG_[A-Za-z0-9_]*\)=.*/\1/p' | sort -r); do
    key=$(printf '%s' "${var#SHOAL_CFG_}" | tr 'A-Z_' 'a-z.')
    eval "value=\${$var}"
    set -- --override "$key=$value" "$@"
done
listeners="${SHOAL_LISTENERS:-PLAINTEXT://0.0.0.0:9092}"
# The container's own hostname (the broker's derived default) means nothing to a client on the
# host: advertise localhost for wildcard listeners unless told otherwise.
advertised="${SHOAL_ADVERTISED_LISTENERS:-$(printf '%s' "$listeners" | sed -e 's#://0\.0\.0\.0:#://localhost:#g' -e 's#://:#://localhost:#g')}"
if [ "$advertised" != "$listeners" ]; then  # a concrete listener host is advertised as it is
    set -- --override "advertised.listeners=$advertised" "$@"
fi
set -- --override "listeners=$listeners" "$@"
if [ -n "${SHOAL_HTTP_LISTENERS+set}" ]; then  # set, even empty (empty turns the listener off)
    set -- --override "shoal.http.listeners=$SHOAL_HTTP_LISTENERS" "$@"
fi
set -- --override "log.dirs=$data_dir" "$@"
if [ -n "${SHOAL_CONFIG_FILE:-}" ]; then
    set -- --config "$SHOAL_CONFIG_FILE" "$@"
fi

if command -v shoal-broker >/dev/null 2>&1; then
    exec shoal-broker "$@"
fi
exec python3 -m shoal.broker "$@"
