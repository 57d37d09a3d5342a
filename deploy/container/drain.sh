#!/bin/sh
# omnilearn-drain NODE [SECONDS]: moves NODE's trainers out of their jobs at a step boundary
# (`omnilearn drain`), then waits up to SECONDS (default 60) until no trainer runs in this
# container any more, so that stopping the worker next loses nothing. The workers' preStop hook.
set -eu
node="${1:?usage: omnilearn-drain NODE [SECONDS]}"
limit="${2:-60}"
omnilearn drain "$node"
trainers() {
  for comm in /proc/[0-9]*/comm; do
    # The kernel keeps 15 characters of a program's name: omnilearn-train(er).
    [ "$(cat "$comm" 2>/dev/null)" = omnilearn-train ] && echo x
  done
}
waited=0
while [ -n "$(trainers)" ] && [ "$waited" -lt "$limit" ]; do
  sleep 1
  waited=$((waited + 1))
done
if [ -n "$(trainers)" ]; then
  echo "omnilearn-drain: trainers still running after ${limit} s" >&2
  exit 1
fi
