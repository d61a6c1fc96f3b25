// The CUDA backend as a plugin: the C entry points of libtroupe_cuda.so, and
// the loader that finds the NVIDIA driver and the plugin at run time, so that
// a CPU run maps no CUDA library (docs/learners.md, "Backends").
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "base/mutex.hpp"
#include "learners/backend.hpp"

// -- the plugin's C ABI ---------------------------------------------------------
// The plugin and the library that loads it must come from the same build: the
// backend crosses as a C++ object (learner_backend*), and the model spec and
// options as pointers to C++ structs. troupe_cuda_abi_version and
// troupe_cuda_build_stamp let the loader refuse a plugin of another build.
extern "C" {
/// The plugin's ABI version (cuda_plugin_abi_version when it matches).
using troupe_cuda_abi_version_fn = int (*)();
/// The plugin's build stamp (cuda_plugin_build_stamp() of its build).
using troupe_cuda_build_stamp_fn = const char* (*)();
/// GPUs the CUDA runtime finds; -1 with the reason in `error` when it fails.
using troupe_cuda_device_count_fn = int (*)(char* error, size_t error_size);
/// A learner_backend* on device 0 for (model_spec*, adam_config*,
/// backend_options*), or nullptr with an errc in `code` and the reason in `error`.
using troupe_cuda_make_backend_fn = void* (*)(const void* spec, const void* adam,
                                              const void* options, int* code, char* error,
                                              size_t error_size);
/// cuBLAS SGEMM rate in GFLOP/s for [rows x k] * [k x n] into `gflops`; 0, or
/// an errc with the reason in `error`.
using troupe_cuda_sgemm_gflops_fn = int (*)(size_t rows, size_t k, size_t n,
                                            double min_seconds, double* gflops,
                                            char* error, size_t error_size);
}

namespace troupe::learners {

/// Version of the entry points above; bumped whenever one of them changes.
inline constexpr int cuda_plugin_abi_version = 1;

/// File name of the plugin.
inline constexpr const char* cuda_plugin_file = "libtroupe_cuda.so";

/// What must be equal in the plugin and the library that loads it: the
/// project version (each passes its TROUPE_CUDA_PLUGIN_VERSION), the
/// compiler, and the sizes of the types that cross.
inline std::string cuda_plugin_build_stamp(const char* project_version) {
  return fmt::format("troupe {} abi {} compiler {} sizes {} {} {} {} {}", project_version,
                     cuda_plugin_abi_version, __VERSION__, sizeof(model_spec),
                     sizeof(adam_config), sizeof(backend_options), sizeof(loss_report),
                     sizeof(error));
}

/// The plugin's entry points, resolved.
struct cuda_plugin_entry_points {
  troupe_cuda_device_count_fn device_count = nullptr; ///< troupe_cuda_device_count
  troupe_cuda_make_backend_fn make_backend = nullptr; ///< troupe_cuda_make_backend
  troupe_cuda_sgemm_gflops_fn sgemm_gflops = nullptr; ///< troupe_cuda_sgemm_gflops
  std::string path;                                   ///< the file that was loaded
};

/// What the NVIDIA driver said, asked without the plugin.
struct cuda_driver_probe {
  int devices = 0;    ///< GPUs the driver finds
  std::string reason; ///< why there are none ("libcuda.so.1 not found: ..."), or empty
};

/// Where the loader looks; the defaults serve every run, tests replace them.
struct cuda_loader_options {
  /// The driver library probed before the plugin is loaded.
  std::string driver_library = "libcuda.so.1";
  /// The plugin's folder; empty: the folder of libtroupe.so or of the
  /// executable holding this code, then the plain name (LD_LIBRARY_PATH,
  /// the caller's RUNPATH, the linker cache).
  std::string plugin_folder;
};

/// Finds the driver and the plugin once each, lazily and thread-safely; a
/// loaded plugin stays loaded for the life of the process.
class cuda_loader {
public:
  /// A loader that has probed and loaded nothing yet.
  explicit cuda_loader(cuda_loader_options options = {});
  cuda_loader(const cuda_loader&) = delete;
  cuda_loader& operator=(const cuda_loader&) = delete;

  /// The driver's answer (dlopen of the driver library, cuInit,
  /// cuDeviceGetCount), asked on the first call only; maps no CUDA runtime.
  cuda_driver_probe probe_driver();

  /// The plugin's entry points, loaded on the first call (its ABI and build
  /// stamp checked); errc::unavailable naming each file tried otherwise.
  result<cuda_plugin_entry_points> plugin();

  /// GPUs usable by the CUDA backend: the driver's count, then the plugin's
  /// CUDA runtime count; errc::unavailable with the reason when there is
  /// none (built without CUDA, no driver, no GPU, no plugin).
  result<int> usable_gpus();

private:
  cuda_driver_probe probe_locked() TROUPE_REQUIRES(mutex_);
  result<cuda_plugin_entry_points> load_locked() TROUPE_REQUIRES(mutex_);

  const cuda_loader_options options_;
  base::mutex mutex_;
  bool probed_ TROUPE_GUARDED_BY(mutex_) = false;
  cuda_driver_probe probe_ TROUPE_GUARDED_BY(mutex_);
  std::optional<result<cuda_plugin_entry_points>> loaded_ TROUPE_GUARDED_BY(mutex_);
};

/// The process's loader (default options), used by choose_device,
/// make_cuda_backend and the benchmarks.
cuda_loader& process_cuda_loader();

/// choose_device with an explicit loader (tests point it at other files).
result<device_choice> choose_device(const std::string& setting, cuda_loader& loader);

/// cuBLAS SGEMM rate (float32, no TF32) in GFLOP/s for [rows x k] * [k x n],
/// timed for at least `min_seconds`, through the plugin.
result<double> cuda_sgemm_gflops(size_t rows, size_t k, size_t n, double min_seconds);

} // namespace troupe::learners
