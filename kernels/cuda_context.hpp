// The GPU resources of one learner (a CUDA stream, a cuBLAS handle bound to
// it, a workspace that grows on demand), passed down explicitly, never a
// global; its GEMM helpers take row-major float32 matrices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/error.hpp"

namespace troupe::kernels {

/// A recorded sequence of a stream's work, instantiated and ready to launch
/// again and again (a cudaGraphExec_t); move-only.
class cuda_graph {
public:
  cuda_graph() = default;
  ~cuda_graph();
  cuda_graph(cuda_graph&& other) noexcept;
  cuda_graph& operator=(cuda_graph&& other) noexcept;
  cuda_graph(const cuda_graph&) = delete;
  cuda_graph& operator=(const cuda_graph&) = delete;

  /// Whether it holds a graph.
  explicit operator bool() const noexcept { return exec_ != nullptr; }

  /// Enqueues the whole graph on `stream`.
  status launch(void* stream) const;

private:
  friend class cuda_context;
  void* exec_ = nullptr;
};

/// Stream, cuBLAS handle and workspace of one device.
class cuda_context {
public:
  /// A context on `device`; TF32 tensor-core GEMMs only when `allow_tf32`.
  /// errc::unavailable without CUDA or without that device.
  static result<std::unique_ptr<cuda_context>> create(int device, bool allow_tf32);

  ~cuda_context();
  cuda_context(const cuda_context&) = delete;
  cuda_context& operator=(const cuda_context&) = delete;

  /// The stream every operation of this context runs on (a cudaStream_t).
  void* stream() const noexcept;

  /// Device scratch of at least `bytes` bytes (reallocated when it grows; the
  /// previous pointer is invalid afterwards).
  result<void*> workspace(size_t bytes);

  /// Waits for the stream.
  status synchronize();

  /// Makes room so that column sums over up to `rows` rows allocate nothing
  /// (a stream being captured must not allocate).
  status reserve_rows(size_t rows);

  /// Counts reallocations of the context's own buffers (the workspace, the
  /// column-sum vector): a graph captured before a change is stale.
  uint64_t generation() const noexcept;

  /// Starts recording what this thread enqueues on the stream into a graph;
  /// nothing runs until the graph is launched. No host synchronization or
  /// allocation may happen until end_capture.
  status begin_capture();

  /// Ends the recording and instantiates the graph (an error when anything
  /// recorded failed or the capture was invalidated).
  result<cuda_graph> end_capture();

  /// z[rows x out] = x[rows x in] * w[out x in]^T.
  status gemm_x_wt(const float* x, const float* w, size_t rows, size_t in, size_t out,
                   float* z);
  /// dw[out x in] = dz[rows x out]^T * x[rows x in].
  status gemm_dzt_x(const float* dz, const float* x, size_t rows, size_t in, size_t out,
                    float* dw);
  /// dx[rows x in] = dz[rows x out] * w[out x in].
  status gemm_dz_w(const float* dz, const float* w, size_t rows, size_t in, size_t out,
                   float* dx);
  /// out[cols] = sum over rows of x[rows x cols].
  status column_sums(const float* x, size_t rows, size_t cols, float* out);
  /// Euclidean norm of x[n] (synchronizes: the result is on the host).
  result<double> norm2(const float* x, size_t n);
  /// x[n] *= alpha.
  status scale(float* x, size_t n, float alpha);

private:
  struct impl;
  explicit cuda_context(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Owning device memory of `count` elements of T (no copy, only move).
template <class T>
class device_array {
public:
  device_array() = default;
  ~device_array() { release(); }
  device_array(device_array&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  device_array& operator=(device_array&& other) noexcept {
    if (this != &other) {
      release();
      data_ = other.data_;
      size_ = other.size_;
      other.data_ = nullptr;
      other.size_ = 0;
    }
    return *this;
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;

  /// Makes room for at least `count` elements (contents are lost on growth).
  status reserve(size_t count);
  /// Device pointer.
  T* data() const noexcept { return data_; }
  /// Capacity in elements.
  size_t size() const noexcept { return size_; }

private:
  void release() noexcept;
  T* data_ = nullptr;
  size_t size_ = 0;
};

/// Raw device allocation helpers behind device_array (errc::device_error on
/// failure, errc::unavailable without CUDA).
result<void*> cuda_allocate(size_t bytes) noexcept;
/// Frees memory from cuda_allocate (nullptr is fine).
void cuda_free(void* p) noexcept;
/// Host-to-device copy on `stream` (asynchronous with respect to the host
/// only for pinned memory).
status cuda_copy_to_device(void* dst, const void* src, size_t bytes,
                           void* stream) noexcept;
/// Device-to-host copy on `stream`; the data is there after a synchronize.
status cuda_copy_to_host(void* dst, const void* src, size_t bytes, void* stream) noexcept;
/// Waits for all work on the current device (every stream).
status cuda_synchronize_device() noexcept;
/// Device memset to zero on `stream`.
status cuda_zero(void* dst, size_t bytes, void* stream) noexcept;

template <class T>
status device_array<T>::reserve(size_t count) {
  if (count <= size_)
    return ok_status();
  release();
  auto p = cuda_allocate(count * sizeof(T));
  if (!p)
    return p.err();
  data_ = static_cast<T*>(*p);
  size_ = count;
  return ok_status();
}

template <class T>
void device_array<T>::release() noexcept {
  cuda_free(data_);
  data_ = nullptr;
  size_ = 0;
}

} // namespace troupe::kernels
