// The learners' CUDA entry points in a build without CUDA: each reports
// errc::unavailable, so callers need no #ifdefs.
#ifndef TROUPE_HAVE_CUDA

#include "kernels/activation.hpp"
#include "kernels/adam.hpp"
#include "kernels/normalize.hpp"
#include "kernels/policy_heads.hpp"
#include "kernels/ppo_update.hpp"

namespace troupe::kernels {

namespace {
status no_cuda() {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}
} // namespace

status cuda_adam_step_async(float*, const float*, float*, float*, size_t,
                            const adam_hyper&, void*) noexcept {
  return no_cuda();
}

status cuda_bias_activation_async(float*, const float*, size_t, size_t, activation_op,
                                  float*, void*) noexcept {
  return no_cuda();
}

status cuda_activation_backward_async(const float*, float*, size_t, activation_op,
                                      void*) noexcept {
  return no_cuda();
}

status cuda_categorical_forward_async(const float*, const int64_t*, size_t, size_t,
                                      float*, float*, float*, void*) noexcept {
  return no_cuda();
}

status cuda_categorical_backward_async(const float*, const float*, const int64_t*,
                                       const float*, const float*, size_t, size_t, float*,
                                       void*) noexcept {
  return no_cuda();
}

status cuda_gaussian_forward_async(const float*, const float*, const float*, size_t,
                                   size_t, float*, float*, float*, void*) noexcept {
  return no_cuda();
}

status cuda_gaussian_backward_async(const float*, const float*, const float*,
                                    const float*, size_t, size_t, float*, float*,
                                    void*) noexcept {
  return no_cuda();
}

status cuda_ppo_terms_async(const float*, const float*, const float*, const float*,
                            const float*, const float*, const float*, size_t,
                            const ppo_term_constants&, float*, float*, float*, float*,
                            void*) noexcept {
  return no_cuda();
}

status cuda_normalize_clip_async(const float*, const float*, const float*, size_t, size_t,
                                 float, float*, void*) noexcept {
  return no_cuda();
}

status cuda_batch_norm_forward_async(const float*, const float*, const float*,
                                     const float*, const float*, size_t, size_t, float*,
                                     float*, void*) noexcept {
  return no_cuda();
}

status cuda_batch_norm_backward_async(const float*, const float*, const float*,
                                      const float*, const float*, const float*, size_t,
                                      size_t, bool, float*, void*) noexcept {
  return no_cuda();
}

status cuda_running_stats_update_async(const double*, size_t, double, float*, float*,
                                       void*) noexcept {
  return no_cuda();
}

status cuda_inverse_std_async(const float*, size_t, double, float*, void*) noexcept {
  return no_cuda();
}

status cuda_multiply_async(const float*, const float*, size_t, float*, void*) noexcept {
  return no_cuda();
}

status cuda_moments_to_stats_async(const double*, size_t, double, float*, float*, float*,
                                   void*) noexcept {
  return no_cuda();
}

} // namespace troupe::kernels

#endif

#ifndef TROUPE_HAVE_CUDA

#include "kernels/cuda_context.hpp"

namespace troupe::kernels {

struct cuda_context::impl {};

cuda_context::cuda_context(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

cuda_context::~cuda_context() = default;

result<std::unique_ptr<cuda_context>> cuda_context::create(int, bool) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

void* cuda_context::stream() const noexcept {
  return nullptr;
}

result<void*> cuda_context::workspace(size_t) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::synchronize() {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::gemm_x_wt(const float*, const float*, size_t, size_t, size_t,
                               float*) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::gemm_dzt_x(const float*, const float*, size_t, size_t, size_t,
                                float*) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::gemm_dz_w(const float*, const float*, size_t, size_t, size_t,
                               float*) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::column_sums(const float*, size_t, size_t, float*) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

result<double> cuda_context::norm2(const float*, size_t) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_context::scale(float*, size_t, float) {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

result<void*> cuda_allocate(size_t) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

void cuda_free(void*) noexcept {}

status cuda_copy_to_device(void*, const void*, size_t, void*) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_copy_to_host(void*, const void*, size_t, void*) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_synchronize_device() noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

status cuda_zero(void*, size_t, void*) noexcept {
  return make_error(errc::unavailable, "troupe was built without CUDA");
}

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
