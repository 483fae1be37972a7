#!/bin/bash
# usage: batch.sh LIST  (each line: name args...)
cd "$(dirname "$0")"
while read -r name args; do
  [ -z "$name" ] && continue
  case "$name" in \#*) continue;; esac
  echo "=== $name $args" >> batch.log
  timeout 260 .venv/bin/python sim.py --name "$name" --timeout 150 $args > /dev/null 2>&1
  tail -1 runs/$name/sim.log >> batch.log
done < "$1"
