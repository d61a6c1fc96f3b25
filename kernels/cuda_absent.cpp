// Definitions of the CUDA entry points for a build without CUDA: each one
// reports errc::unavailable (or "no device"), so callers need no #ifdefs.
#ifndef TROUPE_HAVE_CUDA

#include "kernels/moments.hpp"

namespace troupe::kernels {

size_t cuda_moments_workspace_bytes(size_t, size_t) noexcept {
  return 0;
}

status cuda_moments_async(const float*, size_t, size_t, double*, void*, size_t,
                          void*) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

result<moments> cuda_compute_moments(const float*, size_t, size_t) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

int cuda_device_count() noexcept {
  return 0;
}

} // namespace troupe::kernels

#endif
