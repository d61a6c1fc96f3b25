#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs the
# out-of-tree consumer examples/embed against it: with find_package(troupe)
# (C++ and C programs), from a C-only project (libtroupe.a) and with
# pkg-config (the C program). Also checks that installing from a tree whose
# libraries are not built (what scripts/run leaves) names the missing step.
# Fails with a message naming the step and the file.
#
# usage: consumer.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/troupe-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "consumer.sh: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log" >&2; fail "cmake --install $build failed"; }
libdir=$(cd "$prefix" && ls -d lib*/cmake/troupe | head -n 1 | cut -d/ -f1)
for f in include/troupe/troupe.hpp include/troupe/troupe.h include/troupe/error.hpp \
         "$libdir/libtroupe.so" "$libdir/libtroupe.a" "$libdir/cmake/troupe/troupeConfig.cmake" \
         "$libdir/cmake/troupe/troupeConfigVersion.cmake" \
         "$libdir/cmake/troupe/troupeTargets.cmake" "$libdir/pkgconfig/troupe.pc" bin/troupe; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done
# A CUDA build installs its plugin beside libtroupe.so, and neither the
# library nor the command links a CUDA library (they open the plugin).
if [ -e "$build/libtroupe_cuda.so" ]; then
  [ -e "$prefix/$libdir/libtroupe_cuda.so" ] || fail "the install lacks $libdir/libtroupe_cuda.so"
fi
for f in "$libdir/libtroupe.so" bin/troupe; do
  ldd "$prefix/$f" >"$tmp/ldd.txt"
  if grep -E 'libcublas|libcudart|libcuda\.so' "$tmp/ldd.txt"; then
    fail "$f links a CUDA library"
  fi
done
# The installed command finds its plugin: a fake NVIDIA driver with one GPU
# (tests/learners/fake_cuda_driver.c) makes device = "auto" load it, and the
# start-up line names the file loaded (the CUDA runtime in it then finds no
# GPU behind the fake, so the run goes on on the CPU).
if [ -e "$build/libtroupe_cuda.so" ]; then
  mkdir -p "$tmp/fake_driver"
  cc -shared -fPIC -DFAKE_GPUS=1 "$src/tests/learners/fake_cuda_driver.c" \
    -o "$tmp/fake_driver/libcuda.so.1" || fail "building the fake driver"
  (cd "$tmp" && LD_LIBRARY_PATH="$tmp/fake_driver" "$prefix/bin/troupe" train \
    "$src/config/cartpole_ppo.toml" --set run.device='"auto"' \
    --set algo.total_env_steps=512 --set run.output_dir='"plugin-run"' \
    >"$tmp/plugin.out" 2>"$tmp/plugin.err") ||
    { cat "$tmp/plugin.out" "$tmp/plugin.err" >&2; fail "the installed troupe failed with device auto"; }
  plugin_real=$(cd "$prefix/$libdir" && pwd -P)/libtroupe_cuda.so
  grep -q "the CUDA runtime of $prefix/$libdir/libtroupe_cuda.so\|the CUDA runtime of $plugin_real\|learners on cuda" "$tmp/plugin.out" ||
    { cat "$tmp/plugin.out" "$tmp/plugin.err" >&2; fail "the installed troupe did not load $prefix/$libdir/libtroupe_cuda.so"; }
fi
# The installed headers are the public ones only: no internal header leaks in.
if grep -l '#include "' "$prefix"/include/troupe/*; then
  fail "an installed header includes a project-internal header"
fi
# The shared library exports the C API and hides the layers. (nm writes to
# files: grep -q closing a pipe early would fail the pipeline under pipefail.)
nm -D --defined-only "$prefix/$libdir/libtroupe.so" >"$tmp/symbols.txt"
nm -D --defined-only -C "$prefix/$libdir/libtroupe.so" >"$tmp/symbols_demangled.txt"
grep -q ' T troupe_policy_act$' "$tmp/symbols.txt" ||
  fail "libtroupe.so does not export troupe_policy_act"
grep -q ' T troupe::policy::load(' "$tmp/symbols_demangled.txt" ||
  fail "libtroupe.so does not export troupe::policy::load"
if grep -q 'troupe::learners::' "$tmp/symbols_demangled.txt"; then
  fail "libtroupe.so exports internal symbols (troupe::learners::...)"
fi

# find_package(troupe): configure, build and run outside the source tree.
cmake -S "$src/examples/embed" -B "$tmp/embed" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; fail "configuring examples/embed against $prefix"; }
cmake --build "$tmp/embed" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; fail "building examples/embed"; }
"$tmp/embed/embed_cpp" "$tmp/runs" >"$tmp/cpp.out" 2>"$tmp/cpp.err" ||
  { cat "$tmp/cpp.out" "$tmp/cpp.err" >&2; fail "embed_cpp failed"; }
cat "$tmp/cpp.out"
run_dir=$(tail -n 1 "$tmp/cpp.out")
[ -d "$run_dir/checkpoints" ] || fail "embed_cpp's last line is not a run folder: $run_dir"
grep -q '^trained [0-9]* env steps' "$tmp/cpp.out" || fail "embed_cpp did not train"
grep -q '^game-driven: [1-9][0-9]* updates' "$tmp/cpp.out" ||
  fail "embed_cpp did not train from its own loop"
out=$("$tmp/embed/embed_c" "$run_dir" 0.0 3.0) || fail "embed_c failed: $out"
echo "$out"
[[ $out == "obs_dim 2, discrete, action "[01] ]] || fail "embed_c printed '$out'"
out=$("$tmp/embed/embed_c_static" "$run_dir" 0.0 3.0) || fail "embed_c_static failed: $out"
[[ $out == "obs_dim 2, discrete, action "[01] ]] || fail "embed_c_static printed '$out'"
ldd "$tmp/embed/embed_c_static" >"$tmp/static_ldd.txt"
if grep -q 'libtroupe\.so' "$tmp/static_ldd.txt"; then
  fail "embed_c_static links libtroupe.so instead of libtroupe.a"
fi
# A wrong observation length is an error with the library's message.
if "$tmp/embed/embed_c" "$run_dir" 1 2 3 2>"$tmp/c.err"; then
  fail "embed_c accepted 3 values for obs_dim 2"
fi
grep -q 'has 3 values' "$tmp/c.err" || fail "embed_c's error: $(cat "$tmp/c.err")"

# A C-only project (no C++ compiler enabled) links libtroupe.a through
# troupe::troupe_static: the C++ runtime comes with the target.
mkdir -p "$tmp/c_only"
cp "$src/examples/embed/main.c" "$tmp/c_only/main.c"
cat >"$tmp/c_only/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(c_only LANGUAGES C)
find_package(troupe 0.1 REQUIRED)
add_executable(embed_c_only main.c)
set_target_properties(embed_c_only PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)
target_link_libraries(embed_c_only PRIVATE troupe::troupe_static)
CM
cmake -S "$tmp/c_only" -B "$tmp/c_only/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/c_only.log" 2>&1 ||
  { cat "$tmp/c_only.log" >&2; fail "configuring a C-only project against $prefix"; }
cmake --build "$tmp/c_only/build" >>"$tmp/c_only.log" 2>&1 ||
  { cat "$tmp/c_only.log" >&2; fail "linking troupe::troupe_static from a C-only project"; }
out=$("$tmp/c_only/build/embed_c_only" "$run_dir" 0.0 3.0) ||
  fail "embed_c_only (C-only project, libtroupe.a) failed: $out"
[[ $out == "obs_dim 2, discrete, action "[01] ]] || fail "embed_c_only printed '$out'"
ldd "$tmp/c_only/build/embed_c_only" >"$tmp/c_only_ldd.txt"
if grep -q 'libtroupe\.so' "$tmp/c_only_ldd.txt"; then
  fail "embed_c_only links libtroupe.so instead of libtroupe.a"
fi

# Installing from a configured tree whose libraries were not built (what
# scripts/run leaves: it builds the troupe command only) fails before copying
# anything, naming the step that is missing.
cmake -S "$src" -B "$tmp/unbuilt" -DCMAKE_BUILD_TYPE=Release >"$tmp/unbuilt.log" 2>&1 ||
  { cat "$tmp/unbuilt.log" >&2; fail "configuring an unbuilt tree"; }
if cmake --install "$tmp/unbuilt" --prefix "$tmp/unbuilt-prefix" >"$tmp/unbuilt-install.log" 2>&1
then
  fail "cmake --install of an unbuilt tree succeeded"
fi
# (CMake wraps the message: compare it with its white space collapsed.)
tr -s ' \n' '  ' <"$tmp/unbuilt-install.log" >"$tmp/unbuilt-message.txt"
grep -q 'has not been built' "$tmp/unbuilt-message.txt" &&
  grep -q 'scripts/run builds the troupe command only' "$tmp/unbuilt-message.txt" ||
  { cat "$tmp/unbuilt-install.log" >&2; fail "cmake --install of an unbuilt tree does not name the missing step"; }
[ ! -e "$tmp/unbuilt-prefix" ] || fail "cmake --install of an unbuilt tree copied files first"

# A version the package does not provide is refused.
mkdir -p "$tmp/v9"
cat >"$tmp/v9/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(v9 LANGUAGES CXX)
find_package(troupe 9.0 REQUIRED)
CM
if cmake -S "$tmp/v9" -B "$tmp/v9/build" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$tmp/v9.log" 2>&1; then
  fail "find_package(troupe 9.0) succeeded against $(grep Version "$build/troupe.pc")"
fi

# pkg-config: the C program built by hand.
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
cc -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/embed/main.c" \
  $(pkg-config --cflags --libs troupe) -o "$tmp/embed_c_pc" ||
  fail "building examples/embed/main.c with pkg-config"
out=$("$tmp/embed_c_pc" "$run_dir" 0.0 3.0) || fail "embed_c (pkg-config) failed"
[[ $out == "obs_dim 2, discrete, action "[01] ]] || fail "embed_c (pkg-config) printed '$out'"
echo "consumer.sh: the installed troupe builds and runs every consumer"
