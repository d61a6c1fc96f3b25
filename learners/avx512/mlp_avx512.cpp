// The forward and backward passes of learners/mlp_impl.inc, and the kernels'
// CPU twins they call, compiled for AVX-512 (CMake gives this library
// -mavx512f and friends) inside a build that targets the baseline x86-64.
// learners/mlp.cpp calls these only when the CPU has AVX-512.
//
// This file is its own shared library, built with hidden visibility and a
// version script that exports only the functions below: Eigen's AVX-512
// instantiations carry the same names as the portable ones in the rest of
// the program, and inside a static link one copy would silently replace the
// other. Bound inside this library, each copy keeps its own code.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/activation.hpp"
#include "kernels/moments.hpp"
#include "kernels/normalize.hpp"
#include "learners/avx512/mlp_avx512.hpp"

#if !defined(__AVX512F__) || !defined(__AVX512VL__) || !defined(__FMA__)
#error                                                                                   \
  "learners/avx512 must be compiled with -mavx512f -mavx512vl -mfma (see CMakeLists.txt)"
#endif

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
