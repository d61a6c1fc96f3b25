#!/usr/bin/env bash
# Proves that the thread-safety check bites: correct.cpp must compile under
# clang's -Wthread-safety -Werror=thread-safety, and each case of
# violation.cpp must fail with a thread-safety error (not another error).
#
#   check.sh CLANGXX SOURCE_DIR
#
# Without clang (CLANGXX empty or not runnable) it says so and exits 77, which
# CTest counts as skipped.
set -uo pipefail
clangxx=${1:-}
root=${2:?"usage: check.sh CLANGXX SOURCE_DIR"}
here="$root/tests/thread_safety"
cases=7

if [ -z "$clangxx" ] || ! "$clangxx" --version >/dev/null 2>&1; then
  echo "skipped: no clang++ found; the thread-safety analysis is clang's"
  exit 77
fi
flags=(-std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I"$root")

if ! "$clangxx" "${flags[@]}" "$here/correct.cpp"; then
  echo "FAIL: correct.cpp, which locks as annotated, does not compile"
  exit 1
fi
echo "ok: correct.cpp compiles"

status=0
for k in $(seq 1 "$cases"); do
  out=$("$clangxx" "${flags[@]}" -DTROUPE_VIOLATION="$k" "$here/violation.cpp" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "FAIL: violation case $k compiled; the analysis did not catch it"
    status=1
  elif ! grep -q -- "-Werror,-Wthread-safety" <<<"$out"; then
    echo "FAIL: violation case $k failed for another reason than the analysis:"
    echo "$out"
    status=1
  else
    echo "ok: violation case $k is refused: $(grep -m1 'error:' <<<"$out" | sed 's/.*error: //')"
  fi
done
exit "$status"
