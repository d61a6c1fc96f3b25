// The forward and backward passes of learners/mlp_impl.inc compiled for
// AVX-512 inside a build that targets the baseline x86-64 (SSE2), and picked
// at run time when the CPU has AVX-512. Eigen chooses its packet size from
// the preprocessor, so this file enables the instruction sets for its own
// functions (#pragma GCC target), announces them to Eigen, and renames
// Eigen's namespace: none of its instantiations can collide with the
// portable ones elsewhere in the program (same names, different code).
//
// Every standard header is included before the pragma, so their inline
// functions stay baseline code.
#include <algorithm>
#include <array>
#include <chrono>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "learners/mlp.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX512F__)
#define TROUPE_MLP_AVX512 1
#pragma GCC push_options
// GCC 12's AVX-512 intrinsic headers trip this warning on their own code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512cd")
#include <immintrin.h>
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define __AVX512F__ 1
#define __AVX512VL__ 1
#define __AVX512DQ__ 1
#define __AVX512BW__ 1
#define __AVX512CD__ 1
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define Eigen troupe_eigen_avx512
#include <Eigen/Core>

namespace troupe::learners::avx512 {

#include "learners/mlp_impl.inc"

void network_forward_float(const network_layout& net, const model_spec& spec,
                           const float* params, const float* buffers, const float* input,
                           size_t rows, forward_mode mode, network_cache<float>& cache) {
  forward_impl(net, spec, params, buffers, input, rows, mode, cache);
}

void network_backward_float(const network_layout& net, const model_spec& spec,
                            const float* params, network_cache<float>& cache,
                            const float* d_output, float* grad) {
  backward_impl(net, spec, params, cache, d_output, grad);
}

double gemm_gflops(size_t rows, size_t k, size_t n, double min_seconds) {
  return gemm_gflops_impl(rows, k, n, min_seconds);
}

} // namespace troupe::learners::avx512

#pragma GCC pop_options
#endif

namespace troupe::learners::avx512 {

#ifdef TROUPE_MLP_AVX512
bool available() noexcept {
  static const bool cpu_has_it = [] {
    if (std::getenv("TROUPE_NO_AVX512"))
      return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
           && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("fma");
  }();
  return cpu_has_it;
}
#else
// Built for AVX-512 already (-march=native), or not x86-64 with GCC: the
// portable copy is the one to use.
bool available() noexcept {
  return false;
}

void network_forward_float(const network_layout&, const model_spec&, const float*,
                           const float*, const float*, size_t, forward_mode,
                           network_cache<float>&) {
}

void network_backward_float(const network_layout&, const model_spec&, const float*,
                            network_cache<float>&, const float*, float*) {
}

double gemm_gflops(size_t, size_t, size_t, double) {
  return 0.0;
}
#endif

} // namespace troupe::learners::avx512
