// Test helpers for checkpoints: the documented tensor names written out from
// the convention (not from the model's layout), random checkpoint files
// assembled by hand, random models and statistics, and a float64 reference
// forward pass that reads the tensors by those names.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "learners/model.hpp"
#include "learners/safetensors.hpp"
#include "learners/stats_view.hpp"

namespace troupe::test {

/// The architecture, as the test states it (independent of model_spec).
struct reference_arch {
  bool discrete = true;
  int64_t obs_dim = 4;
  int64_t action_dim = 2;
  std::vector<int64_t> hidden{64, 64};
  bool relu = false;
  bool obs_norm = false;
  double obs_eps = 1e-8;
  double obs_clip = 10.0;
  std::string batch_norm = "none";
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;

  bool has_bn() const { return batch_norm != "none"; }
};

/// One tensor the format requires: name, dtype and shape.
struct required_tensor {
  std::string name;
  learners::st_dtype dtype;
  std::vector<int64_t> shape;
};

/// Every tensor of the documented format for `arch`, from the written rule:
/// Linear(0), [BatchNorm1d(1)], Act, Linear, ... inside each Sequential.
inline std::vector<required_tensor> required_tensors(const reference_arch& a) {
  using learners::st_dtype;
  std::vector<required_tensor> out;
  auto network = [&](const std::string& prefix, int64_t out_dim) {
    int64_t index = 0;
    int64_t in = a.obs_dim;
    for (auto h : a.hidden) {
      auto lin = fmt::format("{}.{}", prefix, index++);
      out.push_back({lin + ".weight", st_dtype::f32, {h, in}});
      out.push_back({lin + ".bias", st_dtype::f32, {h}});
      if (a.has_bn()) {
        auto bn = fmt::format("{}.{}", prefix, index++);
        out.push_back({bn + ".weight", st_dtype::f32, {h}});
        out.push_back({bn + ".bias", st_dtype::f32, {h}});
        out.push_back({bn + ".running_mean", st_dtype::f32, {h}});
        out.push_back({bn + ".running_var", st_dtype::f32, {h}});
        out.push_back({bn + ".num_batches_tracked", st_dtype::i64, {}});
      }
      ++index; // the activation module
      in = h;
    }
    auto lin = fmt::format("{}.{}", prefix, index);
    out.push_back({lin + ".weight", st_dtype::f32, {out_dim, in}});
    out.push_back({lin + ".bias", st_dtype::f32, {out_dim}});
  };
  network("critic", 1);
  if (a.discrete) {
    network("actor", a.action_dim);
  } else {
    network("actor_mean", a.action_dim);
    out.push_back({"actor_logstd", st_dtype::f32, {1, a.action_dim}});
  }
  if (a.obs_norm) {
    out.push_back({"obs_rms.mean", st_dtype::f64, {a.obs_dim}});
    out.push_back({"obs_rms.var", st_dtype::f64, {a.obs_dim}});
    out.push_back({"obs_rms.count", st_dtype::f64, {}});
  }
  return out;
}

/// The metadata of `arch`, spelled out as docs/checkpoints.md documents it.
inline std::map<std::string, std::string> reference_metadata(const reference_arch& a) {
  std::map<std::string, std::string> m;
  m["format"] = "troupe.policy";
  m["format_version"] = "1";
  m["obs_dim"] = std::to_string(a.obs_dim);
  m["action_space"] = a.discrete ? "discrete" : "box";
  m["action_dim"] = std::to_string(a.action_dim);
  m["hidden"] = fmt::format("[{}]", fmt::join(a.hidden, ", "));
  m["activation"] = a.relu ? "relu" : "tanh";
  m["obs_norm"] = a.obs_norm ? "true" : "false";
  m["obs_norm_eps"] = fmt::format("{}", a.obs_eps);
  m["obs_norm_clip"] = fmt::format("{}", a.obs_clip);
  m["batch_norm"] = a.batch_norm;
  m["batch_norm_eps"] = fmt::format("{}", a.bn_eps);
  m["batch_norm_momentum"] = fmt::format("{}", a.bn_momentum);
  return m;
}

/// A random architecture: action kind, widths, activation, normalization.
inline reference_arch random_arch(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> coin(0, 1);
  std::uniform_int_distribution<int64_t> width(1, 24);
  std::uniform_int_distribution<int> layers(0, 3);
  reference_arch a;
  a.discrete = coin(rng) == 1;
  a.obs_dim = width(rng);
  a.action_dim = a.discrete ? std::uniform_int_distribution<int64_t>(2, 9)(rng)
                            : std::uniform_int_distribution<int64_t>(1, 6)(rng);
  a.hidden.clear();
  int n_layers = layers(rng);
  for (int i = 0; i < n_layers; ++i)
    a.hidden.push_back(width(rng));
  a.relu = coin(rng) == 1;
  a.obs_norm = coin(rng) == 1;
  a.obs_eps = std::uniform_real_distribution<double>(1e-8, 1e-3)(rng);
  a.obs_clip = std::uniform_real_distribution<double>(1.0, 10.0)(rng);
  const char* modes[] = {"none", "global", "local"};
  auto mode = std::uniform_int_distribution<int>(0, 2)(rng);
  a.batch_norm = a.hidden.empty() ? "none" : modes[mode];
  a.bn_eps = std::uniform_real_distribution<double>(1e-6, 1e-2)(rng);
  return a;
}

/// A checkpoint file for `arch` with random values everywhere, assembled
/// tensor by tensor (variances positive, counts non-negative).
inline learners::st_file random_checkpoint_file(const reference_arch& a,
                                                std::mt19937_64& rng) {
  using learners::st_dtype;
  using learners::st_tensor;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> positive(0.3, 3.0);
  learners::st_file file;
  file.metadata = reference_metadata(a);
  for (auto& r : required_tensors(a)) {
    size_t n = 1;
    for (auto d : r.shape)
      n *= static_cast<size_t>(d);
    bool is_var = r.name.find("var") != std::string::npos;
    bool is_weight =
      r.name.size() > 7 && r.name.compare(r.name.size() - 7, 7, ".weight") == 0;
    double scale = 1.0;
    if (is_weight && r.shape.size() == 2)
      scale = 1.5 / std::sqrt(static_cast<double>(r.shape[1]));
    if (r.dtype == st_dtype::f32) {
      std::vector<float> v(n);
      for (auto& x : v)
        x = static_cast<float>(is_var ? positive(rng) : scale * normal(rng));
      file.tensors.push_back(st_tensor::from_f32(r.name, r.shape, v.data()));
    } else if (r.dtype == st_dtype::f64) {
      std::vector<double> v(n);
      for (auto& x : v)
        x = is_var ? positive(rng) : r.name == "obs_rms.count" ? 1000.0 : normal(rng);
      file.tensors.push_back(st_tensor::from_f64(r.name, r.shape, v.data()));
    } else {
      std::vector<int64_t> v(n, static_cast<int64_t>(rng() % 1000));
      file.tensors.push_back(st_tensor::from_i64(r.name, r.shape, v.data()));
    }
  }
  return file;
}

/// Deterministic outputs of one observation, in float64.
struct reference_output {
  std::vector<double> logits;
  std::vector<double> mean;
  std::vector<double> log_std;
  double value = 0;
};

/// The float64 forward pass of the documented PyTorch module, reading every
/// tensor of `file` by its documented name.
inline reference_output reference_forward(const reference_arch& a,
                                          const learners::st_file& file,
                                          const std::vector<double>& obs) {
  auto get = [&](const std::string& name) {
    auto* t = file.find(name);
    if (!t)
      throw std::runtime_error("reference: no tensor " + name);
    std::vector<double> out;
    if (t->dtype == learners::st_dtype::f32)
      for (auto x : t->to_f32())
        out.push_back(x);
    else
      out = t->to_f64();
    return out;
  };
  std::vector<double> x = obs;
  if (a.obs_norm) {
    auto mean = get("obs_rms.mean");
    auto var = get("obs_rms.var");
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = std::clamp((x[i] - mean[i]) / std::sqrt(var[i] + a.obs_eps), -a.obs_clip,
                        a.obs_clip);
  }
  auto linear = [&](const std::string& prefix, const std::vector<double>& in) {
    auto w = get(prefix + ".weight");
    auto b = get(prefix + ".bias");
    std::vector<double> out(b.size());
    for (size_t o = 0; o < out.size(); ++o) {
      double s = b[o];
      for (size_t i = 0; i < in.size(); ++i)
        s += w[o * in.size() + i] * in[i];
      out[o] = s;
    }
    return out;
  };
  auto network = [&](const std::string& prefix) {
    std::vector<double> h = x;
    int index = 0;
    for (size_t l = 0; l < a.hidden.size(); ++l) {
      h = linear(fmt::format("{}.{}", prefix, index++), h);
      if (a.has_bn()) {
        auto bn = fmt::format("{}.{}", prefix, index++);
        auto g = get(bn + ".weight");
        auto beta = get(bn + ".bias");
        auto rm = get(bn + ".running_mean");
        auto rv = get(bn + ".running_var");
        for (size_t j = 0; j < h.size(); ++j)
          h[j] = (h[j] - rm[j]) / std::sqrt(rv[j] + a.bn_eps) * g[j] + beta[j];
      }
      for (auto& v : h)
        v = a.relu ? std::max(v, 0.0) : std::tanh(v);
      ++index;
    }
    return linear(fmt::format("{}.{}", prefix, index), h);
  };
  reference_output out;
  out.value = network("critic")[0];
  if (a.discrete) {
    out.logits = network("actor");
  } else {
    out.mean = network("actor_mean");
    out.log_std = get("actor_logstd");
  }
  return out;
}

/// The model_spec that `arch` describes.
inline learners::model_spec to_spec(const reference_arch& a) {
  using namespace learners;
  model_spec s;
  s.obs_dim = a.obs_dim;
  s.action = a.discrete ? action_kind::discrete : action_kind::box;
  (a.discrete ? s.n : s.act_dim) = a.action_dim;
  s.hidden = a.hidden;
  s.activation = a.relu ? activation_kind::relu : activation_kind::tanh;
  s.obs_norm = a.obs_norm;
  s.obs_norm_eps = a.obs_eps;
  s.obs_norm_clip = a.obs_clip;
  s.batch_norm = a.batch_norm == "global"  ? batch_norm_mode::global
                 : a.batch_norm == "local" ? batch_norm_mode::local
                                           : batch_norm_mode::none;
  s.batch_norm_eps = a.bn_eps;
  s.batch_norm_momentum = a.bn_momentum;
  return s;
}

/// A model with every tensor drawn at random (running variances positive),
/// so that no value of the initialization hides a mix-up.
inline learners::actor_critic random_model(const reference_arch& a,
                                           std::mt19937_64& rng) {
  learners::actor_critic model(to_spec(a), rng());
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::uniform_real_distribution<float> positive(0.3f, 3.0f);
  for (auto& t : model.tensors()) {
    bool is_var = t.name.find("running_var") != std::string::npos;
    for (size_t i = 0; i < t.size(); ++i)
      t.data[i] = is_var ? positive(rng) : normal(rng);
  }
  model.set_num_batches_tracked(static_cast<int64_t>(rng() % 100000));
  return model;
}

/// Random observation statistics of dimension `dim` (variances positive).
inline learners::stats_snapshot random_stats(int64_t dim, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 2.0);
  std::uniform_real_distribution<double> positive(0.1, 5.0);
  learners::stats_snapshot s;
  s.stream = "obs";
  s.count = rng() % 1000000;
  for (int64_t i = 0; i < dim; ++i) {
    s.mean.push_back(normal(rng));
    s.var.push_back(positive(rng));
  }
  return s;
}

/// |got - want| within a float32 tolerance scaled by the magnitude of want.
inline bool close_to(double got, double want, double rel = 2e-5) {
  return std::fabs(got - want) <= rel * (1.0 + std::fabs(want));
}

} // namespace troupe::test
