#!/bin/sh
# Fails when a doctest case of binary $1 has a ';' in its name: CTest splits a
# discovered name there (a CMake list), and each half then runs no case and
# passes, so the case itself never runs.
bad=$("$1" --list-test-cases) || { echo "cannot list the cases of $1" >&2; exit 1; }
bad=$(printf '%s\n' "$bad" | grep -F ';')
if [ -n "$bad" ]; then
  echo "test case names with ';' (CTest would never run them):" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
echo "no test case name of $(basename "$1") holds ';'"
