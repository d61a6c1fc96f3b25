#include "learners/mlp.hpp"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

namespace troupe::learners {

namespace {

template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using matrix_view = Eigen::Map<row_matrix<T>>;
template <class T>
using const_matrix_view = Eigen::Map<const row_matrix<T>>;
template <class T>
using row_vector_view = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;

template <class T>
void linear_forward(const linear_slot& s, const T* params, const T* x, size_t rows,
                    T* z) {
  matrix_view<T> out(z, rows, s.out);
  out.noalias() = const_matrix_view<T>(x, rows, s.in)
                  * const_matrix_view<T>(params + s.weight, s.out, s.in).transpose();
  const T* b = params + s.bias;
  for (size_t r = 0; r < rows; ++r) {
    T* row = z + r * s.out;
    for (int64_t j = 0; j < s.out; ++j)
      row[j] += b[j];
  }
}

template <class T>
void activate(activation_kind kind, const T* in, T* out, size_t count) {
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> a(in, count);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> b(out, count);
  if (kind == activation_kind::tanh)
    b = a.tanh();
  else
    b = a.max(T{0});
}

// d_pre = d_post * act'(pre), written with the activation's output h.
template <class T>
void activation_backward(activation_kind kind, const T* h, T* d, size_t count) {
  if (kind == activation_kind::tanh) {
    for (size_t i = 0; i < count; ++i)
      d[i] *= T{1} - h[i] * h[i];
  } else {
    for (size_t i = 0; i < count; ++i)
      if (!(h[i] > T{0}))
        d[i] = T{0};
  }
}

template <class T>
void column_sums(const T* x, size_t rows, size_t cols, T* out) {
  std::fill(out, out + cols, T{0});
  for (size_t r = 0; r < rows; ++r) {
    const T* row = x + r * cols;
    for (size_t j = 0; j < cols; ++j)
      out[j] += row[j];
  }
}

} // namespace

// -- network -----------------------------------------------------------------

template <class T>
void network_forward(const network_layout& net, const model_spec& spec,
                     const T* params, const T* buffers, const T* input,
                     size_t rows, forward_mode mode, network_cache<T>& cache) {
  const size_t stages = net.hidden.size();
  cache.input = input;
  cache.rows = rows;
  cache.z.resize(stages);
  cache.zhat.resize(stages);
  cache.h.resize(stages);
  cache.bn_mean.resize(stages);
  cache.bn_var.resize(stages);
  cache.bn_inv_std.resize(stages);
  const T* x = input;
  for (size_t l = 0; l < stages; ++l) {
    const auto& stage = net.hidden[l];
    const size_t width = static_cast<size_t>(stage.linear.out);
    auto& z = cache.z[l];
    auto& h = cache.h[l];
    z.resize(rows * width);
    h.resize(rows * width);
    linear_forward(stage.linear, params, x, rows, z.data());
    const T* pre_activation = z.data();
    if (stage.has_batch_norm) {
      const auto& bn = stage.batch_norm;
      auto& mean = cache.bn_mean[l];
      auto& var = cache.bn_var[l];
      auto& inv_std = cache.bn_inv_std[l];
      auto& zhat = cache.zhat[l];
      mean.assign(width, T{0});
      var.assign(width, T{0});
      inv_std.resize(width);
      zhat.resize(rows * width);
      bool batch_stats = mode == forward_mode::train
                         && spec.batch_norm == batch_norm_mode::local;
      if (batch_stats) {
        column_sums(z.data(), rows, width, mean.data());
        for (auto& m : mean)
          m /= static_cast<T>(rows);
        for (size_t r = 0; r < rows; ++r)
          for (size_t j = 0; j < width; ++j) {
            T dev = z[r * width + j] - mean[j];
            var[j] += dev * dev;
          }
        for (auto& v : var)
          v /= static_cast<T>(rows);
      } else {
        for (size_t j = 0; j < width; ++j) {
          mean[j] = buffers[bn.running_mean + j];
          var[j] = buffers[bn.running_var + j];
        }
      }
      for (size_t j = 0; j < width; ++j)
        inv_std[j] = T{1} / std::sqrt(var[j] + static_cast<T>(spec.batch_norm_eps));
      const T* gamma = params + bn.weight;
      const T* beta = params + bn.bias;
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < width; ++j) {
          T n = (z[r * width + j] - mean[j]) * inv_std[j];
          zhat[r * width + j] = n;
          h[r * width + j] = gamma[j] * n + beta[j];
        }
      pre_activation = h.data();
    }
    activate(spec.activation, pre_activation, h.data(), rows * width);
    x = h.data();
  }
  cache.out.resize(rows * static_cast<size_t>(net.output.out));
  linear_forward(net.output, params, x, rows, cache.out.data());
}

template <class T>
void network_backward(const network_layout& net, const model_spec& spec,
                      const T* params, network_cache<T>& cache,
                      const T* d_output, T* grad) {
  const size_t rows = cache.rows;
  const size_t stages = net.hidden.size();
  const auto& out = net.output;
  const T* last = stages ? cache.h.back().data() : cache.input;
  matrix_view<T>(grad + out.weight, out.out, out.in).noalias() =
      const_matrix_view<T>(d_output, rows, out.out).transpose()
      * const_matrix_view<T>(last, rows, out.in);
  column_sums(d_output, rows, out.out, grad + out.bias);
  if (stages == 0)
    return;
  auto& d_h = cache.d_upper;
  auto& d_z = cache.d_lower;
  d_h.resize(rows * out.in);
  matrix_view<T>(d_h.data(), rows, out.in).noalias() =
      const_matrix_view<T>(d_output, rows, out.out)
      * const_matrix_view<T>(params + out.weight, out.out, out.in);
  for (size_t l = stages; l-- > 0;) {
    const auto& stage = net.hidden[l];
    const size_t width = static_cast<size_t>(stage.linear.out);
    // d_h becomes dL/d(pre-activation) in place.
    activation_backward(spec.activation, cache.h[l].data(), d_h.data(), rows * width);
    const T* d_linear_out = d_h.data();
    if (stage.has_batch_norm) {
      const auto& bn = stage.batch_norm;
      const auto& zhat = cache.zhat[l];
      const auto& inv_std = cache.bn_inv_std[l];
      const T* gamma = params + bn.weight;
      T* d_gamma = grad + bn.weight;
      T* d_beta = grad + bn.bias;
      std::fill(d_gamma, d_gamma + width, T{0});
      std::fill(d_beta, d_beta + width, T{0});
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < width; ++j) {
          T d = d_h[r * width + j];
          d_gamma[j] += d * zhat[r * width + j];
          d_beta[j] += d;
        }
      d_z.resize(rows * width);
      bool batch_stats = spec.batch_norm == batch_norm_mode::local;
      if (batch_stats) {
        // The batch's mean and variance depend on every row:
        // dz = gamma inv_std / N (N dy - sum dy - zhat sum(dy zhat)).
        const T inv_rows = T{1} / static_cast<T>(rows);
        for (size_t r = 0; r < rows; ++r)
          for (size_t j = 0; j < width; ++j) {
            size_t i = r * width + j;
            d_z[i] = gamma[j] * inv_std[j]
                     * (d_h[i] - d_beta[j] * inv_rows - zhat[i] * d_gamma[j] * inv_rows);
          }
      } else {
        for (size_t r = 0; r < rows; ++r)
          for (size_t j = 0; j < width; ++j) {
            size_t i = r * width + j;
            d_z[i] = d_h[i] * gamma[j] * inv_std[j];
          }
      }
      d_linear_out = d_z.data();
    }
    const auto& lin = stage.linear;
    const T* x = l == 0 ? cache.input : cache.h[l - 1].data();
    matrix_view<T>(grad + lin.weight, lin.out, lin.in).noalias() =
        const_matrix_view<T>(d_linear_out, rows, lin.out).transpose()
        * const_matrix_view<T>(x, rows, lin.in);
    column_sums(d_linear_out, rows, lin.out, grad + lin.bias);
    if (l > 0) {
      // The input gradient goes to whichever scratch is not being read.
      const bool reading_d_h = d_linear_out == d_h.data();
      auto& target = reading_d_h ? d_z : d_h;
      target.resize(rows * static_cast<size_t>(lin.in));
      matrix_view<T>(target.data(), rows, lin.in).noalias() =
          const_matrix_view<T>(d_linear_out, rows, lin.out)
          * const_matrix_view<T>(params + lin.weight, lin.out, lin.in);
      if (reading_d_h)
        d_h.swap(d_z);
    }
  }
}

template <class T>
void update_running_stats(const network_layout& net, const model_spec& spec,
                          const network_cache<T>& cache, T* buffers) {
  const T m = static_cast<T>(spec.batch_norm_momentum);
  const T rows = static_cast<T>(cache.rows);
  const T unbias = cache.rows > 1 ? rows / (rows - T{1}) : T{1};
  for (size_t l = 0; l < net.hidden.size(); ++l) {
    const auto& stage = net.hidden[l];
    if (!stage.has_batch_norm)
      continue;
    const auto& bn = stage.batch_norm;
    for (int64_t j = 0; j < bn.width; ++j) {
      T& rm = buffers[bn.running_mean + j];
      T& rv = buffers[bn.running_var + j];
      rm = (T{1} - m) * rm + m * cache.bn_mean[l][j];
      rv = (T{1} - m) * rv + m * cache.bn_var[l][j] * unbias;
    }
  }
}

template <class T>
void batch_norm_moments(const network_layout& net, const network_cache<T>& cache,
                        std::vector<kernels::moments>& out) {
  for (size_t l = 0; l < net.hidden.size(); ++l) {
    const auto& stage = net.hidden[l];
    if (!stage.has_batch_norm)
      continue;
    const size_t width = static_cast<size_t>(stage.linear.out);
    const auto& z = cache.z[l];
    if constexpr (std::is_same_v<T, float>) {
      out.push_back(kernels::compute_moments(z.data(), cache.rows, width));
    } else {
      kernels::moments m(width);
      m.count = cache.rows;
      for (size_t r = 0; r < cache.rows; ++r)
        for (size_t j = 0; j < width; ++j)
          m.mean[j] += static_cast<double>(z[r * width + j]);
      for (auto& v : m.mean)
        v /= static_cast<double>(cache.rows);
      for (size_t r = 0; r < cache.rows; ++r)
        for (size_t j = 0; j < width; ++j) {
          double d = static_cast<double>(z[r * width + j]) - m.mean[j];
          m.m2[j] += d * d;
        }
      out.push_back(std::move(m));
    }
  }
}

// -- heads -------------------------------------------------------------------

template <class T>
void categorical_forward(const T* logits, size_t rows, size_t n,
                         const int64_t* actions, head_cache<T>& cache) {
  cache.logp.resize(rows);
  cache.entropy.resize(rows);
  cache.aux.resize(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    const T* row = logits + r * n;
    T* log_softmax = cache.aux.data() + r * n;
    T top = *std::max_element(row, row + n);
    T total = T{0};
    for (size_t j = 0; j < n; ++j)
      total += std::exp(row[j] - top);
    T log_total = top + std::log(total);
    T entropy = T{0};
    for (size_t j = 0; j < n; ++j) {
      log_softmax[j] = row[j] - log_total;
      entropy -= std::exp(log_softmax[j]) * log_softmax[j];
    }
    cache.entropy[r] = entropy;
    cache.logp[r] = actions ? log_softmax[actions[r]] : T{0};
  }
}

template <class T>
void categorical_backward(const head_cache<T>& cache, size_t rows, size_t n,
                          const int64_t* actions, const T* d_logp,
                          const T* d_entropy, T* d_logits) {
  // dlogp_a/dz_j = [j == a] - p_j;  dH/dz_j = -p_j (log p_j + H).
  for (size_t r = 0; r < rows; ++r) {
    const T* log_softmax = cache.aux.data() + r * n;
    T* out = d_logits + r * n;
    T entropy = cache.entropy[r];
    for (size_t j = 0; j < n; ++j) {
      T p = std::exp(log_softmax[j]);
      out[j] = -d_logp[r] * p - d_entropy[r] * p * (log_softmax[j] + entropy);
    }
    out[actions[r]] += d_logp[r];
  }
}

template <class T>
void gaussian_forward(const T* mean, const T* log_std, size_t rows, size_t d,
                      const T* actions, head_cache<T>& cache) {
  const T half_log_two_pi = static_cast<T>(0.91893853320467274178);
  cache.logp.resize(rows);
  cache.entropy.resize(rows);
  cache.aux.resize(rows * d);
  T entropy = T{0};
  T log_std_sum = T{0};
  for (size_t j = 0; j < d; ++j) {
    entropy += T{0.5} + half_log_two_pi + log_std[j];
    log_std_sum += log_std[j];
  }
  for (size_t r = 0; r < rows; ++r) {
    T logp = T{0};
    for (size_t j = 0; j < d; ++j) {
      T z = actions ? (actions[r * d + j] - mean[r * d + j]) * std::exp(-log_std[j])
                    : T{0};
      cache.aux[r * d + j] = z;
      logp -= T{0.5} * z * z;
    }
    cache.logp[r] = logp - log_std_sum - static_cast<T>(d) * half_log_two_pi;
    cache.entropy[r] = entropy;
  }
}

template <class T>
void gaussian_backward(const head_cache<T>& cache, const T* log_std, size_t rows,
                       size_t d, const T* d_logp, const T* d_entropy, T* d_mean,
                       T* d_log_std) {
  // logp = sum_j -z_j^2/2 - log_std_j - log(2 pi)/2 with z = (a - mean)/std:
  // dlogp/dmean_j = z_j/std_j, dlogp/dlog_std_j = z_j^2 - 1; dH/dlog_std_j = 1.
  std::fill(d_log_std, d_log_std + d, T{0});
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < d; ++j) {
      T z = cache.aux[r * d + j];
      d_mean[r * d + j] = d_logp[r] * z * std::exp(-log_std[j]);
      d_log_std[j] += d_logp[r] * (z * z - T{1}) + d_entropy[r];
    }
}

// -- observation normalizer ---------------------------------------------------

template <class T>
void normalize_observations(const float* obs, size_t rows, size_t dim,
                            const double* mean, const double* var, double eps,
                            double clip, T* out) {
  std::vector<double> inv_std(dim);
  for (size_t j = 0; j < dim; ++j)
    inv_std[j] = 1.0 / std::sqrt(var[j] + eps);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < dim; ++j) {
      double v = (static_cast<double>(obs[r * dim + j]) - mean[j]) * inv_std[j];
      out[r * dim + j] = static_cast<T>(std::clamp(v, -clip, clip));
    }
}

#define TROUPE_INSTANTIATE_MLP(T)                                                \
  template void network_forward<T>(const network_layout&, const model_spec&,     \
                                   const T*, const T*, const T*, size_t,         \
                                   forward_mode, network_cache<T>&);             \
  template void network_backward<T>(const network_layout&, const model_spec&,    \
                                    const T*, network_cache<T>&, const T*, T*);  \
  template void update_running_stats<T>(const network_layout&, const model_spec&,\
                                        const network_cache<T>&, T*);            \
  template void batch_norm_moments<T>(const network_layout&,                     \
                                      const network_cache<T>&,                   \
                                      std::vector<kernels::moments>&);           \
  template void categorical_forward<T>(const T*, size_t, size_t, const int64_t*, \
                                       head_cache<T>&);                          \
  template void categorical_backward<T>(const head_cache<T>&, size_t, size_t,    \
                                        const int64_t*, const T*, const T*, T*); \
  template void gaussian_forward<T>(const T*, const T*, size_t, size_t,          \
                                    const T*, head_cache<T>&);                   \
  template void gaussian_backward<T>(const head_cache<T>&, const T*, size_t,     \
                                     size_t, const T*, const T*, T*, T*);        \
  template void normalize_observations<T>(const float*, size_t, size_t,          \
                                          const double*, const double*, double,  \
                                          double, T*);

TROUPE_INSTANTIATE_MLP(float)
TROUPE_INSTANTIATE_MLP(double)

} // namespace troupe::learners
