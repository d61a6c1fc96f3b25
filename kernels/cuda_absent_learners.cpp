// The learners' CUDA entry points in a build without CUDA: each reports
// errc::unavailable, so callers need no #ifdefs.
#ifndef TROUPE_HAVE_CUDA

#include "kernels/adam.hpp"

namespace troupe::kernels {

status cuda_adam_step_async(float*, const float*, float*, float*, size_t,
                            const adam_hyper&, void*) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

} // namespace troupe::kernels

#endif
