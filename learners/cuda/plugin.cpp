// The C entry points of libtroupe_cuda.so (learners/cuda_plugin.hpp): the only
// symbols the plugin exports (learners/cuda/exports.map).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda_context.hpp"
#include "learners/cuda/backend.hpp"
#include "learners/cuda_plugin.hpp"

#define TROUPE_CUDA_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace troupe;

// Copies `text` into the caller's buffer, cut to fit and terminated.
void write_error(const std::string& text, char* out, size_t size) {
  if (!out || size == 0)
    return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// cuBLAS SGEMM rate (full float32, no TF32) for [rows x k] * [k x n]. The
// operands are random normal numbers (zeros can take faster paths in
// hardware), and untimed warm-up calls come first, so that cuBLAS's
// heuristics, kernel loading and clocks settle before the clock starts.
result<double> sgemm_gflops(size_t rows, size_t k, size_t n, double min_seconds) {
  using clock_type = std::chrono::steady_clock;
  auto ctx = kernels::cuda_context::create(0, false);
  if (!ctx)
    return ctx.err();
  auto& c = **ctx;
  kernels::device_array<float> x, w, z;
  std::mt19937_64 gen(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [array, count] :
       {std::pair{&x, rows * k}, std::pair{&w, n * k}, std::pair{&z, rows * n}}) {
    if (auto st = array->reserve(count); !st)
      return st.err();
    std::vector<float> host(count);
    for (auto& v : host)
      v = normal(gen);
    if (auto st = kernels::cuda_copy_to_device(array->data(), host.data(),
                                               count * sizeof(float), c.stream());
        !st)
      return st.err();
    // The upload reads pageable host memory: finish it before `host` goes.
    if (auto st = c.synchronize(); !st)
      return st.err();
  }
  for (int i = 0; i < 20; ++i) // warm-up, not timed
    if (auto st = c.gemm_x_wt(x.data(), w.data(), rows, k, n, z.data()); !st)
      return st.err();
  if (auto st = c.synchronize(); !st)
    return st.err();
  size_t reps = 0;
  const auto start = clock_type::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 10; ++i, ++reps)
      if (auto st = c.gemm_x_wt(x.data(), w.data(), rows, k, n, z.data()); !st)
        return st.err();
    if (auto st = c.synchronize(); !st)
      return st.err();
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  } while (elapsed < min_seconds);
  return 2.0 * static_cast<double>(rows * k * n) * static_cast<double>(reps) / elapsed /
         1e9;
}

} // namespace

/// The ABI version this plugin was built with.
TROUPE_CUDA_PLUGIN_EXPORT int troupe_cuda_abi_version() {
  return troupe::learners::cuda_plugin_abi_version;
}

/// The build stamp this plugin was built with.
TROUPE_CUDA_PLUGIN_EXPORT const char* troupe_cuda_build_stamp() {
  static const std::string stamp =
    troupe::learners::cuda_plugin_build_stamp(TROUPE_CUDA_PLUGIN_VERSION);
  return stamp.c_str();
}

/// GPUs the CUDA runtime finds, or -1 with cudaGetDeviceCount's error.
TROUPE_CUDA_PLUGIN_EXPORT int troupe_cuda_device_count(char* error, size_t error_size) {
  int n = 0;
  if (const cudaError_t st = cudaGetDeviceCount(&n); st != cudaSuccess) {
    cudaGetLastError(); // clear the sticky error of a missing device
    write_error(fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(st),
                            static_cast<int>(st)),
                error, error_size);
    return -1;
  }
  return n;
}

/// A learner_backend* on device 0, or nullptr with the error.
TROUPE_CUDA_PLUGIN_EXPORT void* troupe_cuda_make_backend(const void* spec,
                                                         const void* adam,
                                                         const void* options, int* code,
                                                         char* error, size_t error_size) {
  auto backend = troupe::learners::create_cuda_backend(
    *static_cast<const troupe::learners::model_spec*>(spec),
    *static_cast<const troupe::learners::adam_config*>(adam),
    *static_cast<const troupe::learners::backend_options*>(options));
  if (!backend) {
    if (code)
      *code = static_cast<int>(backend.err().code);
    write_error(backend.err().message, error, error_size);
    return nullptr;
  }
  return backend->release();
}

/// The cuBLAS SGEMM floor of `troupe bench learner`.
TROUPE_CUDA_PLUGIN_EXPORT int troupe_cuda_sgemm_gflops(size_t rows, size_t k, size_t n,
                                                       double min_seconds, double* gflops,
                                                       char* error, size_t error_size) {
  auto rate = sgemm_gflops(rows, k, n, min_seconds);
  if (!rate) {
    write_error(rate.err().message, error, error_size);
    return static_cast<int>(rate.err().code);
  }
  *gflops = *rate;
  return 0;
}
