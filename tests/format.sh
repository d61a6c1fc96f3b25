#!/usr/bin/env bash
# Every C and C++ file the repository tracks is formatted as .clang-format
# says: clang-format --dry-run reports each file that it would change.
#
#   tests/format.sh SOURCE_DIR       (run `scripts/format` to apply the format)
set -euo pipefail
cd "$1"
tool=$(command -v clang-format || command -v clang-format-14 || true)
if [ -z "$tool" ]; then
  echo "format: no clang-format on the PATH (scripts/setup --test installs it); skipped"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "format: $1 is not a git checkout, so there is no list of tracked files; skipped"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cu')
unformatted=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! "$tool" --dry-run -Werror "$f" >/dev/null 2>&1; then
    unformatted+=("$f")
  fi
done
if [ ${#unformatted[@]} -ne 0 ]; then
  echo "format: ${#unformatted[@]} of ${#files[@]} files differ from .clang-format (run scripts/format):"
  printf '  %s\n' "${unformatted[@]}"
  exit 1
fi
echo "format: all ${#files[@]} files are formatted"
