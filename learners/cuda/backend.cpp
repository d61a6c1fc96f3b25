// Placeholder until the CUDA backend lands.
#include "learners/backend.hpp"

namespace troupe::learners {

result<std::unique_ptr<learner_backend>> make_cuda_backend(const model_spec&,
                                                           const adam_config&,
                                                           const backend_options&) {
  return make_error(errc::unavailable, "the CUDA learner backend is not built yet");
}

} // namespace troupe::learners
