// CUDA twin of kernels/cpu/moments.cpp: one pass over the batch, Welford per
// thread, Chan merge across the threads of a block (shared memory) and then
// across blocks (a second, tiny kernel).
#include "kernels/moments.hpp"

#include <cuda_runtime.h>

#include <algorithm>

namespace troupe::kernels {

namespace {

constexpr int tile_cols = 32; // threadIdx.x: one column each
constexpr int tile_rows = 8;  // threadIdx.y: interleaved rows
constexpr size_t min_rows_per_thread = 64;
constexpr unsigned max_row_blocks = 2048;

unsigned row_blocks(size_t rows) {
  size_t per_block = tile_rows * min_rows_per_thread;
  size_t blocks = (rows + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, max_row_blocks));
}

__device__ inline void chan_merge(double& na, double& mean_a, double& m2_a, double nb,
                                  double mean_b, double m2_b) {
  if (nb == 0.0)
    return;
  if (na == 0.0) {
    na = nb;
    mean_a = mean_b;
    m2_a = m2_b;
    return;
  }
  double n = na + nb;
  double delta = mean_b - mean_a;
  mean_a += delta * (nb / n);
  m2_a += m2_b + delta * delta * (na * nb / n);
  na = n;
}

// Partials layout in the workspace: [3][row_blocks][dim] doubles
// (count, mean, m2).
__global__ void moments_partials(const float* __restrict__ x, size_t rows, size_t dim,
                                 double* __restrict__ partials) {
  __shared__ double s_n[tile_rows][tile_cols];
  __shared__ double s_mean[tile_rows][tile_cols];
  __shared__ double s_m2[tile_rows][tile_cols];
  const size_t col = static_cast<size_t>(blockIdx.x) * tile_cols + threadIdx.x;
  double n = 0.0, mean = 0.0, m2 = 0.0;
  if (col < dim) {
    const size_t stride = static_cast<size_t>(gridDim.y) * tile_rows;
    for (size_t r = static_cast<size_t>(blockIdx.y) * tile_rows + threadIdx.y; r < rows;
         r += stride) {
      const double v = static_cast<double>(x[r * dim + col]);
      n += 1.0;
      const double delta = v - mean;
      mean += delta / n;
      m2 += delta * (v - mean);
    }
  }
  s_n[threadIdx.y][threadIdx.x] = n;
  s_mean[threadIdx.y][threadIdx.x] = mean;
  s_m2[threadIdx.y][threadIdx.x] = m2;
  __syncthreads();
  for (int half = tile_rows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      double na = s_n[threadIdx.y][threadIdx.x];
      double ma = s_mean[threadIdx.y][threadIdx.x];
      double qa = s_m2[threadIdx.y][threadIdx.x];
      chan_merge(na, ma, qa, s_n[threadIdx.y + half][threadIdx.x],
                 s_mean[threadIdx.y + half][threadIdx.x],
                 s_m2[threadIdx.y + half][threadIdx.x]);
      s_n[threadIdx.y][threadIdx.x] = na;
      s_mean[threadIdx.y][threadIdx.x] = ma;
      s_m2[threadIdx.y][threadIdx.x] = qa;
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < dim) {
    const size_t blocks = gridDim.y;
    const size_t at = static_cast<size_t>(blockIdx.y) * dim + col;
    partials[at] = s_n[0][threadIdx.x];
    partials[blocks * dim + at] = s_mean[0][threadIdx.x];
    partials[2 * blocks * dim + at] = s_m2[0][threadIdx.x];
  }
}

__global__ void moments_finish(const double* __restrict__ partials, unsigned blocks,
                               size_t dim, double* __restrict__ out) {
  const size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= dim)
    return;
  double n = 0.0, mean = 0.0, m2 = 0.0;
  for (unsigned b = 0; b < blocks; ++b) {
    const size_t at = static_cast<size_t>(b) * dim + col;
    chan_merge(n, mean, m2, partials[at], partials[blocks * dim + at],
               partials[2 * static_cast<size_t>(blocks) * dim + at]);
  }
  if (col == 0)
    out[0] = n;
  out[1 + col] = mean;
  out[1 + dim + col] = m2;
}

error cuda_error(const char* what, cudaError_t code) {
  return make_error(errc::device_error, "{}: {} ({})", what, cudaGetErrorString(code),
                    static_cast<int>(code));
}

} // namespace

size_t cuda_moments_workspace_bytes(size_t rows, size_t dim) noexcept {
  return 3 * static_cast<size_t>(row_blocks(rows)) * dim * sizeof(double);
}

status cuda_moments_async(const float* d_x, size_t rows, size_t dim, double* d_out,
                          void* d_workspace, size_t workspace_bytes,
                          void* stream) noexcept {
  if (dim == 0)
    return make_error(errc::invalid_argument, "cuda moments: dim must be > 0");
  if (workspace_bytes < cuda_moments_workspace_bytes(rows, dim))
    return make_error(errc::invalid_argument,
                      "cuda moments: workspace of {} bytes, need {}", workspace_bytes,
                      cuda_moments_workspace_bytes(rows, dim));
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = row_blocks(rows);
  dim3 grid(static_cast<unsigned>((dim + tile_cols - 1) / tile_cols), blocks);
  dim3 block(tile_cols, tile_rows);
  auto partials = static_cast<double*>(d_workspace);
  moments_partials<<<grid, block, 0, s>>>(d_x, rows, dim, partials);
  const unsigned threads = 128;
  moments_finish<<<static_cast<unsigned>((dim + threads - 1) / threads), threads, 0, s>>>(
    partials, blocks, dim, d_out);
  if (auto code = cudaGetLastError(); code != cudaSuccess)
    return cuda_error("cuda moments launch", code);
  return {};
}

result<moments> cuda_compute_moments(const float* x, size_t rows, size_t dim) {
  if (dim == 0)
    return make_error(errc::invalid_argument, "cuda moments: dim must be > 0");
  float* d_x = nullptr;
  double* d_out = nullptr;
  void* d_ws = nullptr;
  const size_t ws = cuda_moments_workspace_bytes(rows, dim);
  auto release = [&] {
    cudaFree(d_x);
    cudaFree(d_out);
    cudaFree(d_ws);
  };
  cudaError_t code = cudaMalloc(&d_x, std::max<size_t>(1, rows * dim) * sizeof(float));
  if (code == cudaSuccess)
    code = cudaMalloc(&d_out, (2 * dim + 1) * sizeof(double));
  if (code == cudaSuccess)
    code = cudaMalloc(&d_ws, ws);
  if (code == cudaSuccess && rows > 0)
    code = cudaMemcpy(d_x, x, rows * dim * sizeof(float), cudaMemcpyHostToDevice);
  if (code != cudaSuccess) {
    release();
    return cuda_error("cuda moments setup", code);
  }
  if (auto st = cuda_moments_async(d_x, rows, dim, d_out, d_ws, ws, nullptr); !st) {
    release();
    return st.err();
  }
  std::vector<double> host(2 * dim + 1);
  code =
    cudaMemcpy(host.data(), d_out, host.size() * sizeof(double), cudaMemcpyDeviceToHost);
  release();
  if (code != cudaSuccess)
    return cuda_error("cuda moments copy-back", code);
  moments out(dim);
  out.count = static_cast<uint64_t>(host[0]);
  std::copy(host.begin() + 1, host.begin() + 1 + dim, out.mean.begin());
  std::copy(host.begin() + 1 + dim, host.end(), out.m2.begin());
  return out;
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky error of a missing driver
    return 0;
  }
  return n;
}

} // namespace troupe::kernels
