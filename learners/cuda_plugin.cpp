// The loader of libtroupe_cuda.so: probes the NVIDIA driver through dlopen
// and the driver API (no CUDA runtime, no cuBLAS), and loads the plugin only
// when the driver finds a GPU or a CUDA backend is asked for.
#include "learners/cuda_plugin.hpp"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <vector>

namespace troupe::learners {

namespace {

#ifdef TROUPE_HAVE_CUDA
// The last dlerror(), or `fallback` when there is none.
std::string last_dl_error(const char* fallback) {
  const char* text = ::dlerror();
  return text ? std::string(text) : std::string(fallback);
}

// The folder of the object (libtroupe.so, or the executable the layers are
// linked into) that holds this function.
std::string own_folder() {
  std::string path;
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&own_folder), &info,
                reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0 &&
      map && map->l_name && map->l_name[0] != '\0')
    path = map->l_name;
  else {
    // The main program's link map has an empty name: ask the kernel.
    std::array<char, 4096> buf{};
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n > 0)
      path.assign(buf.data(), static_cast<size_t>(n));
  }
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// CUDA_SUCCESS of the driver API.
constexpr int cuda_success = 0;

using cu_init_fn = int (*)(unsigned);
using cu_device_get_count_fn = int (*)(int*);
using cu_get_error_name_fn = int (*)(int, const char**);

// "CUDA_ERROR_NO_DEVICE (100)", or the number alone when the driver has no name.
std::string driver_error_text(void* driver, int code) {
  auto name_of =
    reinterpret_cast<cu_get_error_name_fn>(::dlsym(driver, "cuGetErrorName"));
  const char* name = nullptr;
  if (name_of && name_of(code, &name) == cuda_success && name)
    return fmt::format("{} ({})", name, code);
  return fmt::format("error {}", code);
}

template <class Fn>
result<Fn> symbol(void* handle, const char* name, const std::string& file) {
  ::dlerror();
  void* p = ::dlsym(handle, name);
  if (!p)
    return make_error(errc::unavailable, "{} has no symbol {}: {}", file, name,
                      last_dl_error("not found"));
  return reinterpret_cast<Fn>(p);
}
#endif

} // namespace

cuda_loader::cuda_loader(cuda_loader_options options) : options_(std::move(options)) {}

cuda_driver_probe cuda_loader::probe_driver() {
  base::mutex_lock lock(mutex_);
  return probe_locked();
}

cuda_driver_probe cuda_loader::probe_locked() {
  if (probed_)
    return probe_;
  probed_ = true;
#ifndef TROUPE_HAVE_CUDA
  probe_.reason = "troupe was built without CUDA";
#else
  const std::string& file = options_.driver_library;
  // Never closed: the plugin's CUDA runtime opens the same library later.
  void* driver = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    probe_.reason = fmt::format("{} not found (no NVIDIA driver): {}", file,
                                last_dl_error("dlopen failed"));
    return probe_;
  }
  auto init = symbol<cu_init_fn>(driver, "cuInit", file);
  auto count = symbol<cu_device_get_count_fn>(driver, "cuDeviceGetCount", file);
  if (!init || !count) {
    probe_.reason = !init ? init.err().message : count.err().message;
    return probe_;
  }
  if (const int st = (*init)(0); st != cuda_success) {
    probe_.reason = fmt::format("the NVIDIA driver ({}) finds no GPU: cuInit returned {}",
                                file, driver_error_text(driver, st));
    return probe_;
  }
  int devices = 0;
  if (const int st = (*count)(&devices); st != cuda_success) {
    probe_.reason = fmt::format("the NVIDIA driver ({}) finds no GPU: cuDeviceGetCount "
                                "returned {}",
                                file, driver_error_text(driver, st));
    return probe_;
  }
  probe_.devices = devices;
  if (devices <= 0)
    probe_.reason = fmt::format("the NVIDIA driver ({}) finds no GPU", file);
#endif
  return probe_;
}

result<cuda_plugin_entry_points> cuda_loader::plugin() {
  base::mutex_lock lock(mutex_);
  if (!loaded_)
    loaded_ = load_locked();
  return *loaded_;
}

result<cuda_plugin_entry_points> cuda_loader::load_locked() {
#ifndef TROUPE_HAVE_CUDA
  return make_error(errc::unavailable, "troupe was built without CUDA");
#else
  // Next to us first, then the plain name (LD_LIBRARY_PATH, RUNPATH, cache);
  // an explicit folder is the only place tried.
  std::vector<std::string> candidates;
  if (!options_.plugin_folder.empty())
    candidates.push_back(options_.plugin_folder + "/" + cuda_plugin_file);
  else {
    if (auto folder = own_folder(); !folder.empty())
      candidates.push_back(folder + "/" + cuda_plugin_file);
    candidates.push_back(cuda_plugin_file);
  }
  std::vector<std::string> failures;
  void* handle = nullptr;
  std::string path;
  for (const auto& candidate : candidates) {
    handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      // The file the linker found (a plain name resolves through the paths).
      path = candidate;
      link_map* map = nullptr;
      if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
          map->l_name[0] != '\0') {
        char* real = ::realpath(map->l_name, nullptr);
        path = real ? real : map->l_name;
        std::free(real);
      }
      break;
    }
    failures.push_back(last_dl_error("dlopen failed"));
  }
  if (!handle)
    return make_error(errc::unavailable, "the CUDA plugin did not load: {}",
                      fmt::join(failures, "; "));
  auto version =
    symbol<troupe_cuda_abi_version_fn>(handle, "troupe_cuda_abi_version", path);
  if (!version)
    return version.err();
  if (const int v = (*version)(); v != cuda_plugin_abi_version)
    return make_error(errc::unavailable,
                      "{} has ABI version {}, this troupe needs {}: the plugin and "
                      "libtroupe must come from the same build",
                      path, v, cuda_plugin_abi_version);
  auto stamp =
    symbol<troupe_cuda_build_stamp_fn>(handle, "troupe_cuda_build_stamp", path);
  if (!stamp)
    return stamp.err();
  if (const std::string theirs = (*stamp)(),
      ours = cuda_plugin_build_stamp(TROUPE_CUDA_PLUGIN_VERSION);
      theirs != ours)
    return make_error(errc::unavailable,
                      "{} comes from another build (\"{}\", this troupe is \"{}\"): the "
                      "plugin and libtroupe must come from the same build",
                      path, theirs, ours);
  cuda_plugin_entry_points entry;
  entry.path = path;
  auto device_count =
    symbol<troupe_cuda_device_count_fn>(handle, "troupe_cuda_device_count", path);
  auto make =
    symbol<troupe_cuda_make_backend_fn>(handle, "troupe_cuda_make_backend", path);
  auto sgemm =
    symbol<troupe_cuda_sgemm_gflops_fn>(handle, "troupe_cuda_sgemm_gflops", path);
  for (const error* e : {device_count ? nullptr : &device_count.err(),
                         make ? nullptr : &make.err(), sgemm ? nullptr : &sgemm.err()})
    if (e)
      return *e;
  entry.device_count = *device_count;
  entry.make_backend = *make;
  entry.sgemm_gflops = *sgemm;
  return entry;
#endif
}

result<int> cuda_loader::usable_gpus() {
  const auto driver = probe_driver();
  if (driver.devices <= 0)
    return make_error(errc::unavailable, "{}", driver.reason);
  auto entry = plugin();
  if (!entry)
    return make_error(errc::unavailable, "the NVIDIA driver finds {} GPU{} but {}",
                      driver.devices, driver.devices == 1 ? "" : "s",
                      entry.err().message);
  std::array<char, 512> message{};
  const int devices = entry->device_count(message.data(), message.size());
  if (devices < 0)
    return make_error(errc::unavailable, "the CUDA runtime of {} finds no GPU: {}",
                      entry->path, message.data());
  if (devices == 0)
    return make_error(errc::unavailable, "the CUDA runtime of {} finds no GPU",
                      entry->path);
  return devices;
}

cuda_loader& process_cuda_loader() {
  static cuda_loader loader;
  return loader;
}

result<device_choice> choose_device(const std::string& setting, cuda_loader& loader) {
  if (setting == "cpu")
    return device_choice{device_kind::cpu, "device = \"cpu\" in the config"};
  if (setting != "cuda" && setting != "auto")
    return make_error(errc::invalid_argument,
                      "device must be one of \"auto\", \"cpu\", \"cuda\", got \"{}\"",
                      setting);
  auto gpus = loader.usable_gpus();
  if (setting == "cuda") {
    if (!gpus)
      return make_error(errc::unavailable, "device = \"cuda\" but {}",
                        gpus.err().message);
    return device_choice{device_kind::cuda,
                         fmt::format("device = \"cuda\" in the config ({} GPU{})", *gpus,
                                     *gpus == 1 ? "" : "s")};
  }
  if (!gpus)
    return device_choice{device_kind::cpu,
                         fmt::format("device = \"auto\" and {}", gpus.err().message)};
  return device_choice{
    device_kind::cuda,
    fmt::format("device = \"auto\" and the CUDA runtime finds {} GPU{}", *gpus,
                *gpus == 1 ? "" : "s")};
}

result<device_choice> choose_device(const std::string& setting) {
  return choose_device(setting, process_cuda_loader());
}

result<std::unique_ptr<learner_backend>>
make_cuda_backend(const model_spec& spec, const adam_config& adam,
                  const backend_options& options) {
  if (auto valid = spec.validate(); !valid)
    return valid.err();
  auto entry = process_cuda_loader().plugin();
  if (!entry)
    return entry.err();
  int code = 0;
  std::array<char, 1024> message{};
  void* backend =
    entry->make_backend(&spec, &adam, &options, &code, message.data(), message.size());
  if (!backend)
    return error{static_cast<errc>(code), message.data()};
  return std::unique_ptr<learner_backend>(static_cast<learner_backend*>(backend));
}

result<double> cuda_sgemm_gflops(size_t rows, size_t k, size_t n, double min_seconds) {
  auto entry = process_cuda_loader().plugin();
  if (!entry)
    return entry.err();
  double gflops = 0;
  std::array<char, 1024> message{};
  if (const int code = entry->sgemm_gflops(rows, k, n, min_seconds, &gflops,
                                           message.data(), message.size());
      code != 0)
    return error{static_cast<errc>(code), message.data()};
  return gflops;
}

} // namespace troupe::learners
