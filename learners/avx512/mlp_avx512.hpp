// The AVX-512 copy of the MLP passes (learners/avx512/mlp_avx512.cpp), a
// shared library that exports only these functions. Call them only when
// learners::avx512_in_use() (learners/mlp.hpp) says so.
#pragma once

#include <cstddef>

#include "learners/mlp.hpp"

namespace troupe::learners::avx512 {

/// network_forward<float> compiled for AVX-512.
[[gnu::visibility("default")]] void
network_forward_float(const network_layout& net, const model_spec& spec,
                      const float* params, const float* buffers, const float* input,
                      size_t rows, forward_mode mode, network_cache<float>& cache);

/// network_backward<float> compiled for AVX-512.
[[gnu::visibility("default")]] void
network_backward_float(const network_layout& net, const model_spec& spec,
                       const float* params, network_cache<float>& cache,
                       const float* d_output, float* grad);

/// gemm_gflops compiled for AVX-512.
[[gnu::visibility("default")]] double gemm_gflops(size_t rows, size_t k, size_t n,
                                                  double min_seconds);

} // namespace troupe::learners::avx512
