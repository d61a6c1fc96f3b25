// A libtroupe_cuda.so from another build, for the loader's refusal: with
// FAKE_WRONG_ABI its ABI version is one past this build's; otherwise its ABI
// version matches and its build stamp does not.
#include "learners/cuda_plugin.hpp"

/// The ABI version the fake claims.
extern "C" __attribute__((visibility("default"))) int troupe_cuda_abi_version() {
#ifdef FAKE_WRONG_ABI
  return troupe::learners::cuda_plugin_abi_version + 1;
#else
  return troupe::learners::cuda_plugin_abi_version;
#endif
}

/// A build stamp no build has.
extern "C" __attribute__((visibility("default"))) const char* troupe_cuda_build_stamp() {
  return "troupe 0.0.0 of another build";
}
