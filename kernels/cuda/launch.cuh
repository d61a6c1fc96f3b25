// Shared helpers of the learners' CUDA kernels: grid sizing and turning a
// launch failure into a troupe::status.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "base/error.hpp"

namespace troupe::kernels::cuda_detail {

constexpr int block_threads = 256;

/// Blocks for a grid-stride loop over `count` elements.
inline unsigned grid_for(size_t count) {
  size_t blocks = (count + block_threads - 1) / block_threads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, 65535));
}

/// The status of the last launch, naming the kernel.
inline status launch_status(const char* kernel) {
  if (auto code = cudaGetLastError(); code != cudaSuccess)
    return make_error(errc::device_error, "{}: {} ({})", kernel, cudaGetErrorString(code),
                      static_cast<int>(code));
  return ok_status();
}

} // namespace troupe::kernels::cuda_detail
