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
#                               (lower-cased, '_' becomes '.'); a sensitive one (a password, a key,
#                               a JAAS value) goes to the secrets file below, not the command line
#
# Security (README "Securing Shoal"; docker/compose.sasl-ssl.yaml puts them together):
#   SHOAL_TLS_DIR               a mounted directory with broker.pem (the broker's private key and its
#                               certificate chain, leaf first) and optionally ca.pem (the CAs client
#                               certificates must chain to): ssl.keystore.type=PEM,
#                               ssl.keystore.location, ssl.truststore.location, for every TLS listener
#   SHOAL_SSL_CLIENT_AUTH       ssl.client.auth (none, requested, required)
#   SHOAL_SSL_KEY_PASSWORD_FILE a file whose first line is ssl.key.password (an encrypted broker.pem)
#   SHOAL_SCRAM_USERS_FILE      user:password lines: SCRAM-SHA-256 and SCRAM-SHA-512 users created
#                               before the broker starts (salted into the data directory; a user who
#                               already has a credential keeps it, so this is safe on every start)
#   SHOAL_PLAIN_USERS_FILE      user:password lines: the users a PLAIN listener accepts
#   SHOAL_SECRETS_DIR           Docker secrets (default /run/secrets): shoal-scram-users,
#                               shoal-plain-users and shoal-ssl-key-password there are used when
#                               the variables above are unset
#   SHOAL_SUPER_USERS           super.users (User:admin;User:ops)
#   SHOAL_AUTHORIZER            on: ACL authorization (authorizer.class.name = Kafka's StandardAuthorizer)
# Secrets never reach the broker's command line, which every user of the machine can read in
# /proc/<pid>/cmdline: python -m shoal.broker.security_bootstrap writes them to a mode-600
# properties file (under $TMPDIR, default /tmp) passed with a second --config, after
# SHOAL_CONFIG_FILE's (a later file wins; --override arguments beat both).
#
# Arguments are passed on to the broker after these and win over them:
#   docker run shoal --override log.level=DEBUG
set -eu

data_dir="${SHOAL_DATA_DIR:-/var/lib/shoal/data}"
mkdir -p "$data_dir"

# A secret given as a file (SHOAL_*_FILE), else as a Docker secret of the conventional name.
secrets_dir="${SHOAL_SECRETS_DIR:-/run/secrets}"
secret_file() {  # $1: the variable's value, $2: the Docker secret's name
    if [ -n "$1" ]; then
        printf '%s' "$1"
    elif [ -f "$secrets_dir/$2" ]; then
        printf '%s' "$secrets_dir/$2"
    fi
}
scram_users=$(secret_file "${SHOAL_SCRAM_USERS_FILE:-}" shoal-scram-users)
plain_users=$(secret_file "${SHOAL_PLAIN_USERS_FILE:-}" shoal-plain-users)
key_password=$(secret_file "${SHOAL_SSL_KEY_PASSWORD_FILE:-}" shoal-ssl-key-password)
secrets=$(umask 077 && mktemp "${TMPDIR:-/tmp}/shoal-secrets.XXXXXX")
# Its arguments are file names, never secrets; it prints the names of the SHOAL_CFG_* variables
# it moved into the secrets file, which the loop below then keeps off the command line.
moved=$(python3 -m shoal.broker.security_bootstrap --data-dir "$data_dir" --sensitive-env --secrets-out "$secrets" \
    ${scram_users:+--scram-users} ${scram_users:+"$scram_users"} \
    ${plain_users:+--plain-users} ${plain_users:+"$plain_users"} \
    ${key_password:+--ssl-key-password-file} ${key_password:+"$key_password"})
moved=" $(printf '%s' "$moved" | tr '\n' ' ') "

# Prepend, in reverse order of precedence, so that the caller's own arguments
# stay last and beat everything set here.
for var in $(env | sed -n 's/^\(SHOAL_CFG_[A-Za-z0-9_]*\)=.*/\1/p' | sort -r); do
    key=$(printf '%s' "${var#SHOAL_CFG_}" | tr 'A-Z_' 'a-z.')
    case "$moved" in *" $var "*) continue ;; esac
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
if [ -n "${SHOAL_TLS_DIR:-}" ]; then
    if [ ! -f "$SHOAL_TLS_DIR/broker.pem" ]; then
        echo "shoal-entrypoint: SHOAL_TLS_DIR=$SHOAL_TLS_DIR holds no broker.pem (key and certificate chain)" >&2
        exit 2
    fi
    if [ -f "$SHOAL_TLS_DIR/ca.pem" ]; then
        set -- --override "ssl.truststore.type=PEM" --override "ssl.truststore.location=$SHOAL_TLS_DIR/ca.pem" "$@"
    fi
    set -- --override "ssl.keystore.type=PEM" --override "ssl.keystore.location=$SHOAL_TLS_DIR/broker.pem" "$@"
fi
if [ -n "${SHOAL_SSL_CLIENT_AUTH:-}" ]; then
    set -- --override "ssl.client.auth=$SHOAL_SSL_CLIENT_AUTH" "$@"
fi
if [ -n "${SHOAL_SUPER_USERS:-}" ]; then
    set -- --override "super.users=$SHOAL_SUPER_USERS" "$@"
fi
case "${SHOAL_AUTHORIZER:-}" in
    on) set -- --override "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" "$@" ;;
    ""|off) ;;
    *) echo "shoal-entrypoint: SHOAL_AUTHORIZER is on or off, not $SHOAL_AUTHORIZER" >&2; exit 2 ;;
esac
set -- --override "log.dirs=$data_dir" "$@"
if [ -s "$secrets" ]; then  # written only when there is a secret
    set -- --config "$secrets" "$@"
else
    rm -f "$secrets"
fi
if [ -n "${SHOAL_CONFIG_FILE:-}" ]; then
    set -- --config "$SHOAL_CONFIG_FILE" "$@"
fi

if command -v shoal-broker >/dev/null 2>&1; then
    exec shoal-broker "$@"
fi
exec python3 -m shoal.broker "$@"
