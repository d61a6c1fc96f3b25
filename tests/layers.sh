#!/usr/bin/env bash
# The layers hold (docs/architecture.md): every file of a layer folder
# includes only from the folders its layer may see, nothing below actors/
# includes CAF, and the build itself refuses an include that runs back up a
# layer (a probe compiled with envs/'s view cannot include actors/).
#
#   tests/layers.sh SOURCE_DIR CXX_COMPILER LAYER_VIEWS_DIR
set -euo pipefail
src=$1 cxx=$2 views=$3
cd "$src"
failed=0

# check FOLDER "ALLOWED FOLDERS" "DENIED SUBFOLDERS" [SUBFOLDERS NOT CHECKED HERE]
check() {
  local folder=$1 allowed=$2 denied=$3
  shift 3
  local prune=()
  for sub in "$@"; do prune+=(-path "$folder/$sub" -prune -o); done
  while IFS= read -r file; do
    while IFS= read -r line; do
      local target=${line#*\"}
      target=${target%%\"*}
      # Every repository include names its folder; one without (a file next
      # to the includer) stays in the layer.
      [[ $target == */* ]] || continue
      local ok=0
      for prefix in $allowed; do
        [[ $target == "$prefix"/* ]] && ok=1
      done
      for prefix in $denied; do
        [[ $target == "$prefix"/* ]] && ok=0
      done
      if [ $ok = 0 ]; then
        echo "layers: $file includes \"$target\", above its layer (it may include:" \
             "$allowed${denied:+; not $denied})"
        failed=1
      fi
    done < <(grep -E '^\s*#\s*include\s+"' "$file" || true)
  done < <(find "$folder" "${prune[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' \) -print)
}

check base "base" ""
check kernels "base kernels" ""
check envs "base kernels envs" ""
check learners "base kernels envs learners" ""
check actors "base kernels envs learners actors" ""
check edge "base kernels envs learners actors edge" ""
check runtime "base kernels envs learners actors edge runtime" "runtime/cli runtime/embed" cli embed
check runtime/embed "base kernels envs learners actors edge runtime" "runtime/cli"

# Below actors nothing knows CAF.
if caf=$(grep -rlE '^\s*#\s*include\s+<caf/' base kernels envs learners); then
  echo "layers: CAF included below actors/: $caf"
  failed=1
fi

# The build refuses an upward include: envs/'s view has no actors/.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include "actors/log.hpp"\n' > "$probe/probe.cpp"
if "$cxx" -std=c++17 -fsyntax-only -I "$views/troupe_envs" "$probe/probe.cpp" 2>"$probe/err"; then
  echo "layers: a file compiled with envs/'s view included actors/log.hpp"
  failed=1
elif ! grep -q "actors/log.hpp" "$probe/err"; then
  echo "layers: the probe failed for another reason than the missing actors/:"
  cat "$probe/err"
  failed=1
fi
# ... and the same probe with actors/'s view compiles (the check itself works).
if ! "$cxx" -std=c++17 -fsyntax-only -I "$views/troupe_actors" "$probe/probe.cpp"; then
  echo "layers: the probe did not compile with actors/'s view"
  failed=1
fi

[ $failed = 0 ] && echo "layers: every include stays within its layer"
exit $failed
