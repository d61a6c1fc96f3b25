#include "kernels/cuda_context.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <vector>

namespace troupe::kernels {

namespace {

status cuda_status(cudaError_t code, const char* what) {
  if (code == cudaSuccess)
    return ok_status();
  return make_error(errc::device_error, "{}: {} ({})", what, cudaGetErrorString(code),
                    static_cast<int>(code));
}

status cublas_status(cublasStatus_t code, const char* what) {
  if (code == CUBLAS_STATUS_SUCCESS)
    return ok_status();
  return make_error(errc::device_error, "{}: cuBLAS status {}", what,
                    static_cast<int>(code));
}

} // namespace

struct cuda_context::impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  float* ones = nullptr; // column sums are gemv with a vector of ones
  size_t ones_count = 0;
  void* cublas_workspace = nullptr; // set explicitly, so that a capture allocates nothing
  uint64_t generation = 0;

  ~impl() {
    if (cublas)
      cublasDestroy(cublas);
    if (stream)
      cudaStreamDestroy(stream);
    cudaFree(workspace);
    cudaFree(ones);
    cudaFree(cublas_workspace);
  }

  status ensure_ones(size_t count) {
    if (count <= ones_count)
      return ok_status();
    cudaFree(ones);
    ones = nullptr;
    ones_count = 0;
    ++generation;
    if (auto st = cuda_status(cudaMalloc(&ones, count * sizeof(float)), "cudaMalloc");
        !st)
      return st;
    std::vector<float> host(count, 1.0f);
    if (auto st = cuda_status(
          cudaMemcpy(ones, host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
        !st)
      return st;
    ones_count = count;
    return ok_status();
  }
};

cuda_context::cuda_context(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

cuda_context::~cuda_context() = default;

result<std::unique_ptr<cuda_context>> cuda_context::create(int device, bool allow_tf32) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return make_error(errc::unavailable, "the CUDA runtime finds no GPU");
  }
  if (device < 0 || device >= count)
    return make_error(errc::invalid_argument,
                      "CUDA device {} does not exist ({} present)", device, count);
  auto p = std::make_unique<impl>();
  p->device = device;
  if (auto st = cuda_status(cudaSetDevice(device), "cudaSetDevice"); !st)
    return st.err();
  if (auto st = cuda_status(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking),
                            "cudaStreamCreate");
      !st)
    return st.err();
  if (auto st = cublas_status(cublasCreate(&p->cublas), "cublasCreate"); !st)
    return st.err();
  if (auto st = cublas_status(cublasSetStream(p->cublas, p->stream), "cublasSetStream");
      !st)
    return st.err();
  // cuBLAS's own workspace, given once: with it no cuBLAS call allocates,
  // which a captured stream requires (32 MiB, the size cuBLAS suggests for
  // Hopper).
  constexpr size_t cublas_workspace_bytes = size_t{32} << 20;
  if (auto st = cuda_status(cudaMalloc(&p->cublas_workspace, cublas_workspace_bytes),
                            "cudaMalloc (cuBLAS workspace)");
      !st)
    return st.err();
  if (auto st = cublas_status(
        cublasSetWorkspace(p->cublas, p->cublas_workspace, cublas_workspace_bytes),
        "cublasSetWorkspace");
      !st)
    return st.err();
  auto mode = allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  if (auto st = cublas_status(cublasSetMathMode(p->cublas, mode), "cublasSetMathMode");
      !st)
    return st.err();
  return std::unique_ptr<cuda_context>(new cuda_context(std::move(p)));
}

void* cuda_context::stream() const noexcept {
  return impl_->stream;
}

result<void*> cuda_context::workspace(size_t bytes) {
  if (bytes > impl_->workspace_bytes) {
    cudaStreamSynchronize(impl_->stream);
    cudaFree(impl_->workspace);
    impl_->workspace = nullptr;
    impl_->workspace_bytes = 0;
    ++impl_->generation;
    if (auto st = cuda_status(cudaMalloc(&impl_->workspace, bytes), "cudaMalloc"); !st)
      return st.err();
    impl_->workspace_bytes = bytes;
  }
  return impl_->workspace;
}

status cuda_context::synchronize() {
  return cuda_status(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize");
}

status cuda_context::reserve_rows(size_t rows) {
  return impl_->ensure_ones(rows);
}

uint64_t cuda_context::generation() const noexcept {
  return impl_->generation;
}

status cuda_context::begin_capture() {
  return cuda_status(
    cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal),
    "cudaStreamBeginCapture");
}

result<cuda_graph> cuda_context::end_capture() {
  cudaGraph_t graph = nullptr;
  if (auto st =
        cuda_status(cudaStreamEndCapture(impl_->stream, &graph), "cudaStreamEndCapture");
      !st) {
    if (graph)
      cudaGraphDestroy(graph);
    cudaGetLastError(); // a launch refused during the capture leaves its error behind
    return st.err();
  }
  cudaGraphExec_t exec = nullptr;
  auto st = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  if (!st)
    return st.err();
  cuda_graph out;
  out.exec_ = exec;
  return out;
}

cuda_graph::~cuda_graph() {
  if (exec_)
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

cuda_graph::cuda_graph(cuda_graph&& other) noexcept : exec_(other.exec_) {
  other.exec_ = nullptr;
}

cuda_graph& cuda_graph::operator=(cuda_graph&& other) noexcept {
  if (this != &other) {
    if (exec_)
      cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

status cuda_graph::launch(void* stream) const {
  if (!exec_)
    return make_error(errc::invalid_argument, "launching an empty CUDA graph");
  return cuda_status(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                     static_cast<cudaStream_t>(stream)),
                     "cudaGraphLaunch");
}

// Row-major A[r x c] is column-major A^T[c x r] with leading dimension c.
status cuda_context::gemm_x_wt(const float* x, const float* w, size_t rows, size_t in,
                               size_t out, float* z) {
  // Z^T[out x rows] = W[out x in] X^T[in x rows]; W is column-major W^T.
  const float one = 1.0f, zero = 0.0f;
  return cublas_status(cublasSgemm(impl_->cublas, CUBLAS_OP_T, CUBLAS_OP_N,
                                   static_cast<int>(out), static_cast<int>(rows),
                                   static_cast<int>(in), &one, w, static_cast<int>(in), x,
                                   static_cast<int>(in), &zero, z, static_cast<int>(out)),
                       "gemm x w^T");
}

status cuda_context::gemm_dzt_x(const float* dz, const float* x, size_t rows, size_t in,
                                size_t out, float* dw) {
  // dW^T[in x out] = X^T[in x rows] dZ[rows x out]; dZ is column-major dZ^T.
  const float one = 1.0f, zero = 0.0f;
  return cublas_status(cublasSgemm(impl_->cublas, CUBLAS_OP_N, CUBLAS_OP_T,
                                   static_cast<int>(in), static_cast<int>(out),
                                   static_cast<int>(rows), &one, x, static_cast<int>(in),
                                   dz, static_cast<int>(out), &zero, dw,
                                   static_cast<int>(in)),
                       "gemm dz^T x");
}

status cuda_context::gemm_dz_w(const float* dz, const float* w, size_t rows, size_t in,
                               size_t out, float* dx) {
  // dX^T[in x rows] = W^T[in x out] dZ^T[out x rows].
  const float one = 1.0f, zero = 0.0f;
  return cublas_status(cublasSgemm(impl_->cublas, CUBLAS_OP_N, CUBLAS_OP_N,
                                   static_cast<int>(in), static_cast<int>(rows),
                                   static_cast<int>(out), &one, w, static_cast<int>(in),
                                   dz, static_cast<int>(out), &zero, dx,
                                   static_cast<int>(in)),
                       "gemm dz w");
}

status cuda_context::column_sums(const float* x, size_t rows, size_t cols, float* out) {
  if (auto st = impl_->ensure_ones(rows); !st)
    return st;
  // x is column-major x^T[cols x rows]; out = x^T * ones.
  const float one = 1.0f, zero = 0.0f;
  return cublas_status(cublasSgemv(impl_->cublas, CUBLAS_OP_N, static_cast<int>(cols),
                                   static_cast<int>(rows), &one, x,
                                   static_cast<int>(cols), impl_->ones, 1, &zero, out, 1),
                       "column sums");
}

result<double> cuda_context::norm2(const float* x, size_t n) {
  float out = 0.0f;
  if (auto st = cublas_status(cublasSnrm2(impl_->cublas, static_cast<int>(n), x, 1, &out),
                              "nrm2");
      !st)
    return st.err();
  return static_cast<double>(out);
}

status cuda_context::scale(float* x, size_t n, float alpha) {
  return cublas_status(cublasSscal(impl_->cublas, static_cast<int>(n), &alpha, x, 1),
                       "scal");
}

result<void*> cuda_allocate(size_t bytes) noexcept {
  void* p = nullptr;
  if (auto st = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc"); !st)
    return st.err();
  return p;
}

void cuda_free(void* p) noexcept {
  if (p)
    cudaFree(p);
}

status cuda_copy_to_device(void* dst, const void* src, size_t bytes,
                           void* stream) noexcept {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(stream)),
                     "copy to device");
}

status cuda_copy_to_host(void* dst, const void* src, size_t bytes,
                         void* stream) noexcept {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                     static_cast<cudaStream_t>(stream)),
                     "copy to host");
}

status cuda_synchronize_device() noexcept {
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

status cuda_zero(void* dst, size_t bytes, void* stream) noexcept {
  return cuda_status(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)),
                     "memset");
}

} // namespace troupe::kernels
