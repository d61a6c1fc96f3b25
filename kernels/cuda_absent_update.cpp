// The whole-update kernels (kernels/ppo_update.hpp) in a build without CUDA:
// each reports errc::unavailable.
#ifndef TROUPE_HAVE_CUDA

#include "kernels/cuda_context.hpp"
#include "kernels/ppo_update.hpp"

namespace troupe::kernels {

namespace {
status no_cuda() {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}
} // namespace

status cuda_context::reserve_rows(size_t) {
  return no_cuda();
}

uint64_t cuda_context::generation() const noexcept {
  return 0;
}

status cuda_context::begin_capture() {
  return no_cuda();
}

result<cuda_graph> cuda_context::end_capture() {
  return no_cuda().err();
}

cuda_graph::~cuda_graph() = default;

cuda_graph::cuda_graph(cuda_graph&& other) noexcept : exec_(other.exec_) {
  other.exec_ = nullptr;
}

cuda_graph& cuda_graph::operator=(cuda_graph&& other) noexcept {
  exec_ = other.exec_;
  other.exec_ = nullptr;
  return *this;
}

status cuda_graph::launch(void*) const {
  return no_cuda();
}

status cuda_gather_parts_async(const uint32_t*, const device_step_control*, size_t,
                               const gather_part*, size_t, void*) noexcept {
  return no_cuda();
}

status cuda_normalize_advantages_async(float*, size_t, void*) noexcept {
  return no_cuda();
}

status cuda_squared_norm_async(const float*, size_t, double*, void*) noexcept {
  return no_cuda();
}

status cuda_step_prepare_async(const double*, const float*, size_t, device_step_control*,
                               double*, float*, void*) noexcept {
  return no_cuda();
}

status cuda_clipped_adam_step_async(float*, const float*, float*, float*, size_t,
                                    const device_step_control*, void*) noexcept {
  return no_cuda();
}

} // namespace troupe::kernels

#endif
