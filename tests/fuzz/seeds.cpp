// Writes the seed corpus of every fuzz target into DIR/<target>/: small valid
// inputs made by troupe's own writers (so they follow the formats as they
// are today) and the repository's config files. scripts/fuzz runs it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "edge/remote_wire.hpp"
#include "edge/runner_state_file.hpp"
#include "learners/stats_streams.hpp"
#include "envs/registry.hpp"
#include "learners/safetensors.hpp"
#include "tests/fuzz/remote_wire_input.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void must(const status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_seeds: %s: %s\n", what, s.err().message.c_str());
    std::exit(1);
  }
}

void config_seeds(const fs::path& out) {
  int k = 0;
  for (auto& dir : {fs::path(TROUPE_SOURCE_DIR) / "config",
                    fs::path(TROUPE_SOURCE_DIR) / "config" / "experiments"})
    for (auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".toml")
        write(out / fmt::format("file{}.toml", k++), read(entry.path()));
  // With overrides after a NUL (see config.fuzz.cpp).
  write(out / "overrides.toml",
        std::string("[run]\nseed = 3\n") + '\0' + "algo.learning_rate=0.001\nrun.name=x");
}

void safetensors_seeds(const fs::path& out) {
  learners::st_file f;
  f.metadata["format"] = "pt";
  std::vector<float> w = {0.5f, -1.25f, 3.0f, 0.0f, 2.5f, -0.75f};
  std::vector<double> b = {1.0, -2.0};
  std::vector<int64_t> step = {42};
  f.tensors.push_back(learners::st_tensor::from_f32("layer.weight", {2, 3}, w.data()));
  f.tensors.push_back(learners::st_tensor::from_f64("layer.bias", {2}, b.data()));
  f.tensors.push_back(learners::st_tensor::from_i64("step", {}, step.data()));
  auto image = learners::serialize_safetensors(f);
  must(image.ok() ? status{} : status{image.err()}, "safetensors seed");
  write(out / "three_tensors.safetensors",
        std::string(reinterpret_cast<const char*>(image->data()), image->size()));
  learners::st_file empty;
  auto image2 = learners::serialize_safetensors(empty);
  write(out / "empty.safetensors",
        std::string(reinterpret_cast<const char*>(image2->data()), image2->size()));
}

void stats_seeds(const fs::path& out, const fs::path& tmp) {
  learners::stats_streams s;
  must(s.declare({"obs", 3, "cumulative", 0.99}), "declare obs");
  must(s.declare({"ret", 1, "ema", 0.9}), "declare ret");
  must(s.merge({"obs", "w", 5, {0.1, -0.2, 3.0}, {1.0, 2.0, 0.5}}), "merge obs");
  must(s.merge({"ret", "w", 4, {2.0}, {8.0}}), "merge ret");
  must(s.merge({"ret", "w", 2, {1.0}, {1.0}}), "merge ret");
  // Version 2's sender table and fenced incarnations.
  must(s.merge({"obs", "host", 3, {0.0, 1.0, 2.0}, {0.5, 0.5, 0.5}, 0x9e3779b9u, 1, 2}),
       "merge sequenced obs");
  s.fence({"lost", 0x1234u});
  const auto path = tmp / "stats.bin";
  must(s.save(path.string()), "save stats");
  const std::string file = read(path);
  // Mode byte (see stats_state.fuzz.cpp): odd, the whole file; even, the
  // payload alone (the target adds header and checksum).
  write(out / "file.bin", "\x01" + file);
  const size_t head = 8 + 4 + 8;
  write(out / "payload.bin",
        std::string(1, '\0') + file.substr(head, file.size() - head - 8));
}

void runner_state_seeds(const fs::path& out, const fs::path& tmp) {
  std::mt19937_64 gen(7);
  std::vector<actors::env_runner_state> states;
  for (auto [id, n] :
       {std::pair<const char*, size_t>{"CartPole-v1", 2}, {"Pendulum-v1", 1}}) {
    auto env = envs::make_vector_env(id, n, 1);
    must(env.ok() ? status{} : status{env.err()}, "make env");
    (*env)->reset(gen());
    std::vector<float> actions((*env)->num_envs() * (*env)->action_dim(), 0.0f);
    must((*env)->step(actions.data()), "step env");
    actors::env_runner_state s;
    s.runner = fmt::format("runner-{}", states.size());
    s.env_id = id;
    s.env = (*env)->save_state();
    s.gen = {gen(), gen(), gen(), gen()};
    s.episode_return.assign(n, 1.5);
    s.episode_length.assign(n, 3);
    if (n == 1)
      s.discounted_return.assign(n, -2.5); // a runner normalizing rewards
    s.status.batches = 7;
    s.status.env_steps = 7 * n;
    states.push_back(std::move(s));
  }
  const auto path = tmp / "runners.safetensors";
  must(edge::save_runner_states(path.string(), states), "save runner states");
  write(out / "two_runners.safetensors", read(path));
  must(edge::save_runner_states(path.string(), {states[0]}), "save runner state");
  write(out / "one_runner.safetensors", read(path));
  // A runner whose environments saved no state (env_state = none).
  auto stateless = states[0];
  stateless.env.with_state = false;
  stateless.env.rng.clear();
  stateless.env.state.clear();
  stateless.env.elapsed_steps.clear();
  must(edge::save_runner_states(path.string(), {stateless, states[1]}),
       "save runner states without env state");
  write(out / "stateless_runner.safetensors", read(path));
}

void csv_seeds(const fs::path& out) {
  write(out / "header.csv", "x,y,z\n1,2,3\n-0.5, 4e3 ,+7\n\n8,9,10\n");
  write(out / "plain.csv", "0.25\r\n1e-3\r\n-2\r\n");
  write(out / "wide.csv", "1,2,3,4,5,6,7,8\n8,7,6,5,4,3,2,1\n");
}

} // namespace

// One message of each kind, for the shape the first three bytes choose
// (tests/fuzz/remote_wire_input.hpp): 4 environments, obs_dim 3, and
// Discrete(2) (b2 = 3) or Box(2) (b2 = 0x10).
void remote_wire_seeds(const fs::path& out) {
  namespace rw = edge::remote;
  rw::header h;
  h.sequence = 7;
  h.session = 42;
  for (uint8_t b2 : {uint8_t{3}, uint8_t{0x10}}) {
    const auto in =
      fuzz::read_remote_wire_input(std::vector<uint8_t>{3, 2, b2}.data(), 3);
    const rw::env_shape& shape = in.shape;
    const std::string tag = shape.discrete ? "discrete" : "box";
    auto put = [&](const std::string& name, const std::vector<rw::frame>& frames) {
      write(out / (tag + "_" + name), fuzz::write_remote_wire_input(3, 2, b2, frames));
    };
    rw::hello hello{"seed-client", shape};
    put("hello", rw::encode_hello(h, hello));
    rw::welcome w;
    w.session = 42;
    w.num_envs = shape.num_envs;
    put("welcome", rw::encode_welcome(h, w));
    rw::step st;
    st.env_ids = {2, 0, 3};
    st.obs = {0.1f, -0.2f, 0.3f, 1.0f, 2.0f, 3.0f, -1.5f, 0.0f, 4.25f};
    st.rewards = {1.0, 0.0, -2.5};
    st.flags = {0, rw::flag_terminated, rw::flag_truncated};
    st.final_obs = {9.0f, 8.0f, 7.0f, 0.5f, 0.25f, 0.125f};
    put("step", rw::encode_step(h, st));
    rw::act a;
    a.env_ids = {2, 0, 3};
    a.actions = shape.discrete ? std::vector<float>{1, 0, 1}
                               : std::vector<float>{0.5f, -0.5f, 1.0f, 0.0f, 2.0f, -2.0f};
    a.policy_version = 12;
    put("act", rw::encode_act(h, a, shape));
    put("error", rw::encode_error(h, {rw::error_code::count_mismatch, "seed"}));
    for (auto k : {rw::kind::ping, rw::kind::pong, rw::kind::close}) {
      rw::header s = h;
      s.type = k;
      put(rw::to_string(k), rw::encode_signal(s));
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = out / ".tmp";
  fs::create_directories(tmp);
  config_seeds(out / "config");
  safetensors_seeds(out / "safetensors");
  stats_seeds(out / "stats_state", tmp);
  runner_state_seeds(out / "runner_state", tmp);
  csv_seeds(out / "csv");
  remote_wire_seeds(out / "remote_wire");
  fs::remove_all(tmp);
  return 0;
}
