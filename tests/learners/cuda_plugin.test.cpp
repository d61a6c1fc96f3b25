// The CUDA plugin's loader: what device = "auto" and "cuda" say when the
// driver is absent, finds no GPU, or finds one while the plugin is missing,
// and that the plugin of this build loads and passes its ABI check. Fake
// drivers (fake_cuda_driver.c) stand in for the NVIDIA driver.
#include "learners/cuda_plugin.hpp"

#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "tests/temp_folder.hpp"

using namespace troupe::learners;
using troupe::test::temp_folder;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

#ifdef TROUPE_HAVE_CUDA

TEST_CASE("without the NVIDIA driver, device auto picks the CPU naming the driver "
          "library and cuda fails naming it") {
  temp_folder dir("cuda-no-driver");
  cuda_loader_options options;
  options.driver_library = (dir.path / "libcuda.so.1").string(); // absent
  cuda_loader loader(options);
  const auto probe = loader.probe_driver();
  CHECK(probe.devices == 0);
  CHECK(contains(probe.reason, options.driver_library + " not found"));
  auto automatic = choose_device("auto", loader);
  REQUIRE(automatic);
  CHECK(automatic->kind == device_kind::cpu);
  CHECK(contains(automatic->reason, options.driver_library + " not found"));
  auto cuda = choose_device("cuda", loader);
  REQUIRE_FALSE(cuda);
  CHECK(cuda.err().code == troupe::errc::unavailable);
  CHECK(contains(cuda.err().message, "device = \"cuda\" but"));
  CHECK(contains(cuda.err().message, options.driver_library + " not found"));
}

TEST_CASE("a driver that finds no GPU makes device auto pick the CPU and cuda fail, "
          "each with cuInit's error") {
  cuda_loader_options options;
  options.driver_library = TROUPE_FAKE_CUDA_DRIVER_0;
  // Nothing of the plugin may be needed to say so: point it at nowhere.
  temp_folder empty("cuda-no-plugin");
  options.plugin_folder = empty.path.string();
  cuda_loader loader(options);
  auto automatic = choose_device("auto", loader);
  REQUIRE(automatic);
  CHECK(automatic->kind == device_kind::cpu);
  CAPTURE(automatic->reason);
  CHECK(contains(automatic->reason, "finds no GPU"));
  CHECK(contains(automatic->reason, "CUDA_ERROR_NO_DEVICE (100)"));
  auto cuda = choose_device("cuda", loader);
  REQUIRE_FALSE(cuda);
  CHECK(contains(cuda.err().message, "CUDA_ERROR_NO_DEVICE (100)"));
}

TEST_CASE("a driver with a GPU but no plugin file makes device auto pick the CPU with "
          "the loader's error naming the file, and cuda fail with it") {
  temp_folder empty("cuda-no-plugin");
  cuda_loader_options options;
  options.driver_library = TROUPE_FAKE_CUDA_DRIVER_1;
  options.plugin_folder = empty.path.string();
  cuda_loader loader(options);
  CHECK(loader.probe_driver().devices == 1);
  const std::string file = (empty.path / cuda_plugin_file).string();
  auto entry = loader.plugin();
  REQUIRE_FALSE(entry);
  CHECK(entry.err().code == troupe::errc::unavailable);
  CAPTURE(entry.err().message);
  // dlerror's text: the path, then why.
  CHECK(contains(entry.err().message, file + ": cannot open shared object file"));
  auto automatic = choose_device("auto", loader);
  REQUIRE(automatic);
  CHECK(automatic->kind == device_kind::cpu);
  CHECK(contains(automatic->reason, "finds 1 GPU but the CUDA plugin did not load"));
  CHECK(contains(automatic->reason, file));
  auto cuda = choose_device("cuda", loader);
  REQUIRE_FALSE(cuda);
  CHECK(contains(cuda.err().message, file));
  // The answer is kept: asking again gives the same error, without a new dlopen.
  auto again = loader.plugin();
  REQUIRE_FALSE(again);
  CHECK(again.err().message == entry.err().message);
}

TEST_CASE("a plugin of another build is refused: a wrong ABI version or build stamp, "
          "each named with both values") {
  struct fake {
    const char* folder;
    std::string expected;
  };
  for (const fake& f :
       {fake{TROUPE_FAKE_CUDA_PLUGIN_WRONG_ABI,
             fmt::format("has ABI version {}, this troupe needs {}",
                         cuda_plugin_abi_version + 1, cuda_plugin_abi_version)},
        fake{TROUPE_FAKE_CUDA_PLUGIN_WRONG_STAMP,
             fmt::format("comes from another build (\"troupe 0.0.0 of another build\", "
                         "this troupe is \"troupe ")}}) {
    cuda_loader_options options;
    options.driver_library = TROUPE_FAKE_CUDA_DRIVER_1;
    options.plugin_folder = f.folder;
    cuda_loader loader(options);
    auto entry = loader.plugin();
    REQUIRE_FALSE(entry);
    const std::string message = entry.err().message;
    CAPTURE(message);
    CHECK(entry.err().code == troupe::errc::unavailable);
    CHECK(contains(message, std::string(f.folder) + "/" + cuda_plugin_file));
    CHECK(contains(message, f.expected));
    CHECK(contains(message, "must come from the same build"));
    if (f.folder == std::string(TROUPE_FAKE_CUDA_PLUGIN_WRONG_STAMP))
      CHECK(contains(message, fmt::format("abi {} compiler {} sizes",
                                          cuda_plugin_abi_version, __VERSION__)));
    auto automatic = choose_device("auto", loader);
    REQUIRE(automatic);
    CHECK(automatic->kind == device_kind::cpu);
    CHECK(contains(automatic->reason, f.expected));
  }
}

TEST_CASE("the plugin of this build loads, passes the ABI and build-stamp checks and "
          "answers with the CUDA runtime's device count") {
  cuda_loader_options options;
  options.driver_library = TROUPE_FAKE_CUDA_DRIVER_1; // so that auto loads the plugin
  options.plugin_folder = TROUPE_CUDA_PLUGIN_FOLDER;
  cuda_loader loader(options);
  auto entry = loader.plugin();
  if (!entry)
    FAIL(entry.err().message);
  // The loader names the file it loaded by its real path.
  CHECK(entry->path ==
        std::filesystem::canonical(std::filesystem::path(TROUPE_CUDA_PLUGIN_FOLDER) /
                                   cuda_plugin_file)
          .string());
  char message[256] = {};
  const int runtime_devices = entry->device_count(message, sizeof message);
  auto automatic = choose_device("auto", loader);
  REQUIRE(automatic);
  CAPTURE(automatic->reason);
  if (runtime_devices > 0) {
    CHECK(automatic->kind == device_kind::cuda);
  } else {
    // No GPU behind the fake driver: the runtime's own error is the reason.
    CHECK(automatic->kind == device_kind::cpu);
    CHECK(contains(automatic->reason, "the CUDA runtime of " + entry->path));
    if (runtime_devices < 0)
      CHECK(contains(automatic->reason, message));
  }
}

#else

TEST_CASE("a build without CUDA says so for device auto and cuda") {
  cuda_loader loader;
  auto automatic = choose_device("auto", loader);
  REQUIRE(automatic);
  CHECK(automatic->kind == device_kind::cpu);
  CHECK(contains(automatic->reason, "troupe was built without CUDA"));
  auto cuda = choose_device("cuda", loader);
  REQUIRE_FALSE(cuda);
  CHECK(contains(cuda.err().message, "troupe was built without CUDA"));
  auto entry = loader.plugin();
  REQUIRE_FALSE(entry);
  CHECK(contains(entry.err().message, "troupe was built without CUDA"));
}

#endif
