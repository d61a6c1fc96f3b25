// troupe's PPO loss and hand-written gradient against PyTorch autograd on the
// documented CleanRL-style module, both in float64. Runs Debian's
// /usr/bin/python3 with torch; skips with a message where it is missing.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "learners/losses.hpp"
#include "learners/optimizer.hpp"
#include "tests/skip.hpp"

using namespace troupe::learners;

namespace {

const char* python = "/usr/bin/python3";

bool torch_available() {
  std::string cmd = fmt::format("{} -c 'import torch' > /dev/null 2>&1", python);
  return std::system(cmd.c_str()) == 0;
}

template <class T>
std::string json_list(const T* data, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("{}{:.17g}", i ? "," : "", static_cast<double>(data[i]));
  return out + "]";
}

struct torch_result {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;
};

torch_result run_torch(const std::string& case_path) {
  std::string script =
    std::string(TROUPE_SOURCE_DIR) + "/tests/learners/torch_ppo_reference.py";
  std::string cmd = fmt::format("{} {} {}", python, script, case_path);
  torch_result out;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char buffer[1 << 16];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    text.append(buffer, got);
  REQUIRE(pclose(pipe) == 0);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "loss") {
      fields >> out.loss;
    } else if (kind == "grad") {
      std::string name;
      fields >> name;
      double v;
      auto& g = out.grads[name];
      while (fields >> v)
        g.push_back(v);
    }
  }
  return out;
}

} // namespace

TEST_CASE("the PPO loss and gradient equal PyTorch autograd on the documented module") {
  if (!torch_available()) {
    TROUPE_SKIP("/usr/bin/python3 cannot import torch (install Debian's python3-torch)");
  }
  auto seed =
    (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  int index = 0;
  for (bool box : {false, true})
    for (auto bn :
         {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
      for (auto act : {activation_kind::tanh, activation_kind::relu}) {
        std::string bn_name = to_string(bn), act_name = to_string(act);
        CAPTURE(box);
        CAPTURE(bn_name);
        CAPTURE(act_name);
        model_spec spec;
        spec.obs_dim = 5;
        spec.hidden = {16, 8};
        spec.activation = act;
        spec.batch_norm = bn;
        if (box) {
          spec.action = action_kind::box;
          spec.act_dim = 2;
        } else {
          spec.n = 3;
        }
        actor_critic model(spec, rng());
        // Larger output weights than the init's, so ratios spread over the clip range.
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& t : model.tensors()) {
          if (t.name.find("running_var") != std::string::npos)
            for (size_t i = 0; i < t.size(); ++i)
              t.data[i] = 0.5f + std::abs(normal(rng));
          else if (t.name.find("running_mean") != std::string::npos ||
                   t.name.find("bias") != std::string::npos || t.name == "actor_logstd")
            for (size_t i = 0; i < t.size(); ++i)
              t.data[i] = 0.3f * normal(rng);
          else if (t.name.rfind("actor", 0) == 0)
            for (size_t i = 0; i < t.size(); ++i)
              t.data[i] += 0.2f * normal(rng);
        }
        const size_t rows = 64;
        std::vector<double> obs(rows * spec.obs_dim), box_actions(rows * spec.act_dim);
        std::vector<int64_t> actions(rows);
        std::vector<double> old_logp(rows), adv(rows), ret(rows), old_v(rows);
        for (auto& v : obs)
          v = normal(rng);
        for (auto& v : box_actions)
          v = normal(rng);
        for (auto& a : actions)
          a = static_cast<int64_t>(rng() % 3);
        for (size_t r = 0; r < rows; ++r) {
          adv[r] = normal(rng);
          ret[r] = normal(rng);
          old_v[r] = normal(rng) * 0.5;
          old_logp[r] = (box ? -2.5 : -1.1) + 0.4 * normal(rng);
        }
        ppo_config config;
        config.ent_coef = 0.05;
        config.clip_value_loss = index % 2 == 0;
        std::vector<double> params(model.params(), model.params() + model.param_count());
        std::vector<double> buffers(model.buffers(),
                                    model.buffers() + model.buffer_count());
        ppo_batch<double> batch{
          rows,       obs.data(), actions.data(), box_actions.data(), old_logp.data(),
          adv.data(), ret.data(), old_v.data()};
        train_options options;
        options.update_running_stats = false;
        loss_workspace<double> ws;
        std::vector<double> grad(params.size());
        auto report =
          ppo_loss_and_grad(spec, model.layout(), params.data(), buffers.data(), batch,
                            config, options, ws, grad.data());
        CHECK(report.clip_fraction > 0.0);

        std::string path = fmt::format("/tmp/troupe_torch_parity_{}_{}.json",
                                       static_cast<long>(getpid()), index++);
        {
          std::ofstream f(path);
          f << "{\"spec\": {\"action\": \"" << (box ? "box" : "discrete")
            << "\", \"obs_dim\": " << spec.obs_dim
            << ", \"head_dim\": " << spec.head_dim()
            << ", \"hidden\": [16, 8], \"activation\": \"" << act_name
            << "\", \"batch_norm\": \"" << bn_name
            << "\", \"batch_norm_eps\": " << fmt::format("{:.17g}", spec.batch_norm_eps)
            << "},\n\"config\": {"
            << fmt::format("\"clip_coef\": {}, \"vf_coef\": {}, \"ent_coef\": {}, "
                           "\"clip_value_loss\": {}, \"normalize_advantages\": true",
                           config.clip_coef, config.vf_coef, config.ent_coef,
                           config.clip_value_loss ? "true" : "false")
            << "},\n\"tensors\": {";
          bool first = true;
          for (const auto& t : model.tensors()) {
            f << (first ? "" : ",\n") << "\"" << t.name << "\": {\"shape\": ["
              << fmt::format("{}", fmt::join(t.shape, ","))
              << "], \"data\": " << json_list(t.data, t.size()) << "}";
            first = false;
          }
          f << "},\n\"batch\": {\"obs\": " << json_list(obs.data(), obs.size())
            << ", \"actions\": " << json_list(actions.data(), actions.size())
            << ", \"box_actions\": " << json_list(box_actions.data(), box_actions.size())
            << ", \"old_logprob\": " << json_list(old_logp.data(), rows)
            << ", \"advantages\": " << json_list(adv.data(), rows)
            << ", \"returns\": " << json_list(ret.data(), rows)
            << ", \"old_values\": " << json_list(old_v.data(), rows) << "}}\n";
        }
        auto torch = run_torch(path);
        std::remove(path.c_str());
        CHECK(report.loss == doctest::Approx(torch.loss).epsilon(1e-10));
        size_t compared = 0;
        for (const auto& t : model.layout().tensors) {
          if (t.is_buffer)
            continue;
          CAPTURE(t.name);
          auto it = torch.grads.find(t.name);
          REQUIRE(it != torch.grads.end());
          REQUIRE(it->second.size() == t.size);
          double diff = 0, norm = 0, total = 0;
          for (auto g : grad)
            total += g * g;
          for (size_t i = 0; i < t.size; ++i) {
            diff +=
              (grad[t.offset + i] - it->second[i]) * (grad[t.offset + i] - it->second[i]);
            norm += it->second[i] * it->second[i];
          }
          CHECK(std::sqrt(diff) <=
                1e-9 * std::max(std::sqrt(norm), 1e-3 * std::sqrt(total)));
          ++compared;
        }
        CHECK(compared == torch.grads.size());
      }
}

TEST_CASE("clipping plus Adam with linear annealing equals PyTorch's clip_grad_norm_ and "
          "torch.optim.Adam") {
  if (!torch_available()) {
    TROUPE_SKIP("/usr/bin/python3 cannot import torch (install Debian's python3-torch)");
  }
  auto seed =
    (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 200, steps = 12;
  adam_config config;
  config.lr = 1e-2;
  config.eps = 1e-5;
  const double max_norm = 3.0;
  std::vector<float> params(n);
  for (auto& p : params)
    p = normal(rng);
  std::string input = "params";
  for (auto p : params)
    input += fmt::format(" {:.9g}", p);
  input += fmt::format("\nconfig {} {} {} {} {}\n", config.lr, config.beta1, config.beta2,
                       config.eps, max_norm);
  adam_optimizer opt(n, config);
  size_t clipped_steps = 0;
  for (size_t t = 1; t <= steps; ++t) {
    std::vector<float> g(n);
    const float scale =
      t % 2 ? 1.0f : 0.05f; // some steps above the clip norm, some below
    for (auto& x : g)
      x = scale * normal(rng);
    input += "grad";
    for (auto x : g)
      input += fmt::format(" {:.9g}", x);
    input += "\n";
    clipped_steps += clip_grad_norm(g.data(), n, max_norm) > max_norm;
    opt.step(params.data(), g.data(),
             linear_lr(config.lr, static_cast<int64_t>(t), steps));
  }
  CHECK(clipped_steps > 0);
  CHECK(clipped_steps < steps);
  std::string in_path =
    fmt::format("/tmp/troupe_torch_adam_{}.txt", static_cast<long>(getpid()));
  {
    std::ofstream f(in_path);
    f << input;
  }
  std::string cmd = fmt::format("{} {}/tests/learners/torch_adam_reference.py < {}",
                                python, TROUPE_SOURCE_DIR, in_path);
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char buffer[1 << 16];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    text.append(buffer, got);
  REQUIRE(pclose(pipe) == 0);
  std::remove(in_path.c_str());
  std::istringstream fields(text);
  std::string kind;
  fields >> kind;
  REQUIRE(kind == "params");
  for (size_t i = 0; i < n; ++i) {
    double v = 0;
    REQUIRE(static_cast<bool>(fields >> v));
    CAPTURE(i);
    CHECK(std::abs(params[i] - v) <= 1e-5 * std::max(1.0, std::abs(v)));
  }
}
