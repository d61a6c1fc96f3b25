// A CPU run of `troupe train` maps no CUDA library: the CUDA backend is a
// plugin that only a CUDA device choice loads (docs/learners.md, "The CUDA
// plugin"). The dynamic loader's own log (LD_DEBUG=files) lists every object
// the process maps, at start-up and through dlopen, so the check needs no
// timing.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "tests/cli_support.hpp"

using troupe::test::lines_of;
using troupe::test::run_command;
using troupe::test::temp_folder;

namespace {

// The objects the loader's log says it mapped ("file=NAME [0];  generating
// link map"), by file name.
std::set<std::string> mapped_objects(const std::string& ld_debug_log) {
  static const std::regex mapped(
    R"(^\s*\d+:\s+file=(\S+) \[\d+\];\s+generating link map)");
  std::set<std::string> out;
  for (const auto& line : lines_of(ld_debug_log)) {
    std::smatch m;
    if (std::regex_search(line, m, mapped)) {
      const std::string path = m[1];
      out.insert(path.substr(path.rfind('/') + 1));
    }
  }
  return out;
}

// The CUDA libraries among `objects`: the runtime, cuBLAS, the plugin.
std::set<std::string> cuda_objects(const std::set<std::string>& objects) {
  static const std::regex cuda(
    R"(^lib(cudart|cublas|cublasLt|troupe_cuda|nvrtc|nvJitLink)\b.*)");
  std::set<std::string> out;
  for (const auto& name : objects)
    if (std::regex_match(name, cuda))
      out.insert(name);
  return out;
}

// `troupe train` on CartPole for ten batches with `device`, under LD_DEBUG.
troupe::test::run_result train_logged(const temp_folder& dir, const std::string& device) {
  return run_command(
    fmt::format(
      "LD_DEBUG=files timeout -k 10 {} '{}' train '{}/config/cartpole_ppo.toml' "
      "--set run.output_dir='\"out-{}\"' --set algo.total_env_steps=5120 "
      "--set run.device='\"{}\"'",
      troupe::test::troupe_command_limit_s, TROUPE_BINARY, TROUPE_SOURCE_DIR, device,
      device),
    dir);
}

} // namespace

TEST_CASE("a CPU training run of troupe maps no CUDA library") {
  temp_folder dir("cuda-free");
  const auto run = train_logged(dir, "cpu");
  REQUIRE_MESSAGE(run.status == 0, "troupe train failed:\n" << run.err);
  CHECK(run.out.find("learners on cpu") != std::string::npos);
  const auto objects = mapped_objects(run.err);
  // The log is read right: the libraries troupe links are in it.
  CHECK(objects.count("libcaf_core.so.0.17.6") == 1);
  CHECK(objects.count("libzmq.so.5") == 1);
  const auto cuda = cuda_objects(objects);
  CHECK_MESSAGE(cuda.empty(), "mapped: " << fmt::format("{}", fmt::join(cuda, ", ")));
  CHECK(objects.count("libcuda.so.1") == 0);
}

TEST_CASE("device auto without a usable GPU picks the CPU and maps no CUDA runtime, "
          "cuBLAS or plugin") {
  temp_folder dir("cuda-free-auto");
  const auto run = train_logged(dir, "auto");
  REQUIRE_MESSAGE(run.status == 0, "troupe train failed:\n" << run.err);
  const auto objects = mapped_objects(run.err);
  CHECK(objects.count("libcaf_core.so.0.17.6") == 1);
  if (run.out.find("learners on cuda") != std::string::npos) {
    // A GPU machine: the plugin is what auto chose, and it is mapped.
    CHECK(objects.count("libtroupe_cuda.so") == 1);
    return;
  }
  CHECK(run.out.find("learners on cpu (device = \"auto\" and ") != std::string::npos);
  // The driver library may be mapped where one is installed (the probe keeps it).
  const auto cuda = cuda_objects(objects);
  CHECK_MESSAGE(cuda.empty(), "mapped: " << fmt::format("{}", fmt::join(cuda, ", ")));
}
