#!/usr/bin/env bash
# Waits until FILE exists, at most SECONDS (exit 1 then): a command queued by scripts/gpu/run.sh
# that needs what a later device call brings (a binary too large to travel with the first).
#   bash scripts/gpu/wait_for.sh FILE SECONDS
for _ in $(seq $(( $2 / 5 ))); do [ -e "$1" ] && exit 0; sleep 5; done
[ -e "$1" ]
