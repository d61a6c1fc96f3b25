// The CUDA backend's factory inside libtroupe_cuda.so; the library reaches it
// through the plugin's entry points (learners/cuda/plugin.cpp), never directly.
#pragma once

#include <memory>

#include "learners/backend.hpp"

namespace troupe::learners {

/// A CUDA backend on device 0 (errc::unavailable without a device).
result<std::unique_ptr<learner_backend>>
create_cuda_backend(const model_spec& spec, const adam_config& adam,
                    const backend_options& options);

} // namespace troupe::learners
