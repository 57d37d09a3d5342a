#!/bin/sh
# The image's entry point: `omnilearn ARGS...`.
# A cluster file handed over as a secret (OMNILEARN_CLUSTER_SECRET: a podman secret under
# /run/secrets, a Kubernetes Secret volume) is mounted read-only and often readable by others,
# which omnilearn refuses for a credential; it is copied first to OMNILEARN_CLUSTER_FILE
# (default /var/lib/omnilearn/cluster.toml) with mode 0600, where the head may also rewrite it.
set -eu
if [ -n "${OMNILEARN_CLUSTER_SECRET:-}" ]; then
  if [ ! -r "$OMNILEARN_CLUSTER_SECRET" ]; then
    echo "omnilearn-entrypoint: OMNILEARN_CLUSTER_SECRET=$OMNILEARN_CLUSTER_SECRET cannot be" \
      "read (mount the cluster file's secret there)" >&2
    exit 2
  fi
  OMNILEARN_CLUSTER_FILE="${OMNILEARN_CLUSTER_FILE:-/var/lib/omnilearn/cluster.toml}"
  mkdir -p "$(dirname "$OMNILEARN_CLUSTER_FILE")"
  (umask 077 && cat "$OMNILEARN_CLUSTER_SECRET" >"$OMNILEARN_CLUSTER_FILE.tmp")
  mv "$OMNILEARN_CLUSTER_FILE.tmp" "$OMNILEARN_CLUSTER_FILE"
  export OMNILEARN_CLUSTER_FILE
fi
exec omnilearn "$@"
