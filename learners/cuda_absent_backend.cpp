// make_cuda_backend in a build without CUDA.
#ifndef TROUPE_HAVE_CUDA

#include "learners/backend.hpp"

namespace troupe::learners {

result<std::unique_ptr<learner_backend>>
make_cuda_backend(const model_spec&, const adam_config&, const backend_options&) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

} // namespace troupe::learners

#endif
