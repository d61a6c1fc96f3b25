// The schema: one table per section. Adding an option is adding one line
// here; validation, defaults and `troupe config describe` follow from it.
#include "runtime/config.hpp"

#include <limits>

#include <fmt/format.h>

#include "learners/algorithm.hpp"

namespace troupe::runtime {

namespace {

constexpr double int_max = 9007199254740991.0; // 2^53 - 1

option_spec make_spec(const char* section, const char* key, value_type type, value def) {
  option_spec s;
  s.section = section;
  s.key = key;
  s.type = type;
  s.default_value = std::move(def);
  return s;
}

option_spec opt_bool(const char* section, const char* key, bool def,
                     const char* description) {
  auto s = make_spec(section, key, value_type::boolean, def);
  s.description = description;
  return s;
}

option_spec opt_int(const char* section, const char* key, int64_t def, double min,
                    double max, const char* description) {
  auto s = make_spec(section, key, value_type::integer, def);
  s.min = min;
  s.max = max;
  s.bounded = true;
  s.description = description;
  return s;
}

option_spec opt_float(const char* section, const char* key, double def, double min,
                      double max, const char* description, bool min_exclusive = false,
                      bool max_exclusive = false) {
  auto s = make_spec(section, key, value_type::floating, def);
  s.min = min;
  s.max = max;
  s.bounded = true;
  s.min_exclusive = min_exclusive;
  s.max_exclusive = max_exclusive;
  s.description = description;
  return s;
}

option_spec opt_string(const char* section, const char* key, const char* def,
                       std::vector<std::string> choices, const char* description) {
  auto s = make_spec(section, key, value_type::string, std::string{def});
  s.choices = std::move(choices);
  s.description = description;
  return s;
}

option_spec opt_int_list(const char* section, const char* key, std::vector<int64_t> def,
                         double min, double max, const char* description) {
  auto s = make_spec(section, key, value_type::int_list, std::move(def));
  s.min = min;
  s.max = max;
  s.bounded = true;
  s.description = description;
  return s;
}

// -- [run] -------------------------------------------------------------------

void add_run(std::vector<option_spec>& out) {
  out.push_back(
    opt_string("run", "name", "troupe", {},
               "name of the run; the run folder is <output_dir>/<name>-<timestamp>"));
  out.push_back(opt_int("run", "seed", 1, 0, 4294967295.0,
                        "seed of every random stream (env i is seeded with seed + i)"));
  out.push_back(
    opt_string("run", "output_dir", "runs", {}, "folder that receives run folders"));
  out.push_back(opt_string(
    "run", "device", "auto", {"auto", "cpu", "cuda"},
    "where learners compute: auto uses a GPU when the CUDA runtime finds one"));
  out.push_back(opt_int("run", "log_every_updates", 10, 1, int_max,
                        "a metrics row (and an info log line, unless a progress line was "
                        "asked for) every this many updates"));
  out.push_back(opt_bool(
    "run", "tensorboard", true,
    "also write each metrics row as TensorBoard scalars (events.out.tfevents.*)"));
  out.push_back(opt_bool(
    "run", "norm_diagnostics", false,
    "measure what normalization does to the policy (metrics columns obs_shift_kl, "
    "obs_drift_kl, obs_drift_kl_max, return_std_shift, return_std_drift): before each "
    "batch, on the previous batch's observations, with the newest weights"));
  out.push_back(opt_int("run", "checkpoint_every_updates", 100, 0, int_max,
                        "a checkpoint every this many updates (0: only at the end)"));
  out.push_back(opt_int("run", "keep_checkpoints", 5, 0, int_max,
                        "newest checkpoints kept in the run folder (0: all)"));
  out.push_back(opt_int("run", "max_runner_restarts", 3, 0, 1000,
                        "restarts of one failed environment runner before the run ends"));
  out.push_back(opt_int("run", "max_learner_restarts", 2, 0, 1000,
                        "restarts of one failed learner before the run ends"));
  out.push_back(
    opt_int("run", "threads", 2, 1, 256, "scheduler threads of the actor system"));
}

// -- [env] -------------------------------------------------------------------

void add_env(std::vector<option_spec>& out) {
  out.push_back(opt_string("env", "id", "CartPole-v1", {},
                           "Gymnasium id of the environment (troupe env list)"));
  out.push_back(opt_int("env", "num_envs", 4, 1, 1048576,
                        "environments stepped as one batch by each environment runner"));
  out.push_back(opt_int("env", "threads", 1, 1, 256,
                        "threads each runner steps its environments on"));
  out.push_back(opt_float(
    "env", "obs_scale", 1.0, 0.0, 1e9,
    "observations of runner 0 are multiplied by this (heterogeneous-worker experiment)",
    true, false));
  out.push_back(
    opt_float("env", "obs_scale_spread", 1.0, 1.0, 1e9,
              "runner i scales observations by obs_scale * spread^i (1: all alike)"));
  out.push_back(opt_float("env", "num_envs_spread", 1.0, 1.0, 1e3,
                          "runner i steps round(num_envs * spread^i) environments "
                          "(heterogeneous batch sizes; 1: all alike)"));
  out.push_back(opt_int("env", "slow_runners", 0, 0, int_max,
                        "the last this many runner slots are slowed by env.slowdown "
                        "(an uneven fleet; at most num_learners x runners_per_learner)"));
  out.push_back(opt_float("env", "slowdown", 1.0, 1.0, 1e3,
                          "the slowed runners' environment steps take this many times "
                          "as long: each waits (slowdown - 1) x its measured step time, "
                          "holding a scheduler thread (give run.threads one per slowed "
                          "runner)"));
}

// -- [algo] and [algo.<name>] -------------------------------------------------

// [algo] holds what every algorithm shares: which one runs, how learners and
// runners are laid out, the step budget, the batch shape, the optimizer
// (the parameter server's Adam, its learning rate schedule and gradient
// clip) and the discount. Each algorithm's own hyperparameters are its
// section [algo.<name>], built from the registry (learners/algorithm.hpp).
void add_algo(std::vector<option_spec>& out) {
  std::vector<std::string> names;
  std::string summary;
  for (auto& a : learners::algorithms()) {
    names.push_back(a.name);
    summary += fmt::format("{}{} ({})", summary.empty() ? "" : "; ", a.name, a.summary);
  }
  out.push_back(opt_string("algo", "name", "ppo", names, ""));
  out.back().description =
    "the algorithm; its hyperparameters are the section [algo.<name>]: " + summary;
  out.push_back(opt_string("algo", "mode", "async", {"sync", "async"},
                           "sync: one mean gradient of every learner per update; async: "
                           "each gradient applied as it arrives"));
  out.push_back(opt_int("algo", "total_env_steps", 500000, 1, int_max,
                        "training stops after this many environment steps"));
  out.push_back(opt_int(
    "algo", "max_staleness", 4, 0, int_max,
    "async: gradients computed on weights more than this many versions old are dropped"));
  out.push_back(opt_int(
    "algo", "num_learners", 1, 0, 64,
    "learner actors of this process, each with its environment runners (0: only on the "
    "coordinator of a run across processes, whose workers host the learners)"));
  out.push_back(opt_int("algo", "learner_threads", 0, 0, 2,
                        "CPU threads of each learner: 2 computes a PPO or A3C "
                        "minibatch's actor and critic at once (the same numbers as 1); "
                        "0: 2 for the only learner of a sync run in one process with its "
                        "own environment runners (not a game's or remote clients'), on "
                        "the CPU, without batch norm, on a machine with 2 or more "
                        "hardware threads, else 1"));
  out.push_back(opt_int("algo", "runners_per_learner", 1, 1, 64,
                        "environment runners feeding each learner"));
  out.push_back(opt_int(
    "algo", "num_steps", 128, 1, 1048576,
    "steps per environment in one trajectory batch (CleanRL num_steps; IMPALA unroll)"));
  out.push_back(opt_float(
    "algo", "learning_rate", 2.5e-4, 0.0, 1.0,
    "Adam learning rate of the parameter server (CleanRL PPO 2.5e-4)", true, false));
  out.push_back(
    opt_bool("algo", "anneal_lr", true,
             "anneal the learning rate linearly to 0 over total_env_steps (CleanRL)"));
  out.push_back(opt_float("algo", "adam_eps", 1e-5, 0.0, 1.0,
                          "Adam epsilon (CleanRL 1e-5)", true, false));
  out.push_back(opt_float(
    "algo", "max_grad_norm", 0.5, 0.0, 1e9,
    "global gradient norm clip of the parameter server (CleanRL 0.5; 0: none)"));
  out.push_back(
    opt_float("algo", "gamma", 0.99, 0.0, 1.0, "discount factor (CleanRL 0.99)"));
  for (auto& a : learners::algorithms()) {
    const std::string section = std::string{"algo."} + a.name;
    for (auto& h : a.hyperparameters) {
      option_spec s;
      s.section = section;
      s.key = h.key;
      s.description = h.description;
      switch (h.type) {
      case learners::hyperparameter_type::boolean:
        s.type = value_type::boolean;
        s.default_value = h.default_value != 0;
        break;
      case learners::hyperparameter_type::integer:
        s.type = value_type::integer;
        s.default_value = static_cast<int64_t>(h.default_value);
        s.bounded = true;
        break;
      case learners::hyperparameter_type::floating:
        s.type = value_type::floating;
        s.default_value = h.default_value;
        s.bounded = true;
        break;
      }
      s.min = h.min;
      s.max = h.max;
      s.min_exclusive = h.min_exclusive;
      s.max_exclusive = h.max_exclusive;
      out.push_back(std::move(s));
    }
  }
}

// -- [stats] -----------------------------------------------------------------

void add_stats(std::vector<option_spec>& out) {
  out.push_back(opt_string("stats", "mode", "cumulative", {"cumulative", "ema"},
                           "cumulative: exact moments of all data seen; ema: running = "
                           "momentum*running + (1-momentum)*batch"));
  out.push_back(opt_float("stats", "momentum", 0.99, 0.0, 1.0,
                          "weight of the running statistics in ema mode", false, true));
  out.push_back(
    opt_int("stats", "freeze_after", 0, 0, int_max,
            "an experiment's control: once a stream has merged this many samples "
            "its snapshot stops changing for every reader (observation streams "
            "count env steps; global batch-norm streams count each minibatch row "
            "once per epoch); 0: never"));
  out.push_back(opt_int("stats", "publish_every_merges", 8, 1, int_max,
                        "the keeper publishes a snapshot after this many merges"));
  out.push_back(opt_int("stats", "publish_interval_ms", 10, 0, 3600000,
                        "...or this long after an unpublished merge (0: only by count)"));
}

// -- [model] -----------------------------------------------------------------

void add_model(std::vector<option_spec>& out) {
  out.push_back(
    opt_int_list("model", "hidden", {64, 64}, 1, 65536,
                 "widths of the hidden layers of the actor and of the critic"));
  out.push_back(opt_string("model", "activation", "tanh", {"tanh", "relu"},
                           "activation after every hidden layer"));
  out.push_back(opt_bool("model", "obs_norm", false,
                         "normalize observations with the global running statistics"));
  out.push_back(
    opt_string("model", "obs_norm_scope", "global", {"global", "runner"},
               "with obs_norm: global (the keeper's moments of every runner's "
               "observations) or runner (each runner's own running moments, as "
               "one VecNormalize per worker; checkpoints and eval keep the "
               "global ones)"));
  out.push_back(opt_float("model", "obs_norm_eps", 1e-8, 0.0, 1.0,
                          "added to the variance before the square root in the "
                          "observation normalizer (runners, checkpoints and troupe eval)",
                          true, false));
  out.push_back(opt_float("model", "obs_norm_clip", 10.0, 0.0, 1e6,
                          "normalized observations are clipped to [-clip, clip]", true,
                          false));
  out.push_back(opt_bool("model", "reward_norm", false,
                         "divide rewards by the global running standard deviation of "
                         "each environment's discounted return (Gymnasium's "
                         "NormalizeReward, the keeper's stream \"ret\"); episode "
                         "returns in the metrics stay raw"));
  out.push_back(
    opt_string("model", "reward_norm_scope", "global", {"global", "runner"},
               "with reward_norm: global (the keeper's variance of every runner's "
               "discounted returns) or runner (each runner's own running variance, "
               "as one VecNormalize per worker)"));
  out.push_back(opt_string(
    "model", "norm_update", "batch", {"batch", "step"},
    "when an env runner's normalizers take in its own data: batch (a whole batch "
    "is normalized with the statistics as of its start) or step (each step with "
    "those merged with the batch's steps up to and including it, as Gymnasium's "
    "NormalizeObservation and NormalizeReward update before normalizing); the "
    "keeper gets the same moments either way"));
  out.push_back(opt_float("model", "reward_norm_gamma", 0.99, 0.0, 1.0,
                          "discount of reward normalization's returns; not set: "
                          "algo.gamma"));
  out.push_back(opt_float("model", "reward_norm_eps", 1e-8, 0.0, 1.0,
                          "added to the return variance before the square root in the "
                          "reward normalizer",
                          true, false));
  out.push_back(opt_float("model", "reward_norm_clip", 10.0, 0.0, 1e6,
                          "normalized rewards are clipped to [-clip, clip]", true,
                          false));
  out.push_back(opt_string("model", "batch_norm", "none", {"none", "global", "local"},
                           "batch norm between hidden layers: global running statistics, "
                           "per-batch (naive baseline), or none"));
  out.push_back(opt_float("model", "batch_norm_eps", 1e-5, 0.0, 1.0,
                          "added to the variance before the square root in batch norm",
                          true, false));
  out.push_back(
    opt_string("model", "batch_norm_stats", "cumulative", {"cumulative", "ema"},
               "global batch norm: the keeper's statistics of each layer are cumulative "
               "(all data) or ema (momentum 1 - batch_norm_momentum per merge)"));
  out.push_back(opt_float("model", "batch_norm_momentum", 0.1, 0.0, 1.0,
                          "local batch norm: running = (1 - momentum)*running + "
                          "momentum*batch (PyTorch's convention)",
                          true, false));
}

void add_cluster(std::vector<option_spec>& out) {
  out.push_back(opt_string("cluster", "listen", "", {},
                           "HOST:PORT the coordinator of a run across processes listens "
                           "on (port 0 picks a free one); empty: a run in one process "
                           "(troupe train --listen sets it)"));
  out.push_back(opt_string("cluster", "token", "", {},
                           "shared secret a worker must present to join; empty: "
                           "the environment variable TROUPE_CLUSTER_TOKEN"));
  out.push_back(opt_int("cluster", "heartbeat_ms", 500, 10, 3600000,
                        "interval of the middleman's heartbeats between nodes"));
  out.push_back(opt_int("cluster", "timeout_ms", 3000, 50, 86400000,
                        "a node silent for this long is dropped as lost (set on every "
                        "node; larger than heartbeat_ms)"));
  out.push_back(opt_int("cluster", "reconnect_s", 60, 0, 86400,
                        "how long a worker keeps trying to reach its coordinator before "
                        "it exits with status 1"));
  out.push_back(opt_string("cluster", "tls_certificate", "", {},
                           "PEM certificate of the coordinator, signed by the run's CA; "
                           "with tls_key and tls_ca it turns on TLS with certificate "
                           "checks on both ends of every connection"));
  out.push_back(opt_string("cluster", "tls_key", "", {},
                           "PEM private key (unencrypted) of tls_certificate"));
  out.push_back(opt_string("cluster", "tls_ca", "", {},
                           "PEM CA certificate every node's certificate must chain to"));
  out.push_back(opt_int("cluster", "stats_interval_ms", 200, 0, 60000,
                        "a worker host merges its runners' moment deltas for this long "
                        "and sends one per statistics stream to the keeper (exact: "
                        "the merge is associative); longer costs the coordinator less "
                        "and leaves the global statistics that much older; 0: each "
                        "delta as it comes"));
  out.push_back(opt_int("cluster", "metrics_interval_ms", 100, 0, 60000,
                        "a worker host sends its learners' reports to the metrics "
                        "actor as one message per this interval; longer costs the "
                        "coordinator less and lets the run pass algo.total_env_steps "
                        "by about this long of env steps; 0: each as it comes"));
  out.push_back(opt_string("cluster", "data_plane", "allreduce", {"allreduce"},
                           "how the hosts' gradients meet: every host with learners "
                           "holds a replica of the parameter server, and the hosts' "
                           "sums of gradients are all-reduced through Gloo once per "
                           "round (docs/cluster.md, \"The data plane\"); the only "
                           "value since \"server\" was removed"));
  out.push_back(opt_int("cluster", "hosts", 0, 0, 4096,
                        "the worker hosts with learners the data plane's group waits "
                        "for before its first round; 0: it forms with the "
                        "members there are (the coordinator alone when it has learners, "
                        "else the first host with learners); a host that comes later "
                        "enters at the next epoch"));
  out.push_back(opt_string("cluster", "data_interface", "", {},
                           "the address the coordinator's Gloo data port"
                           " binds to and is reached at (one address, "
                           "never a wildcard; the data plane is not encrypted); empty: "
                           "its cluster.listen host. Each worker binds its own: troupe "
                           "worker --data-interface, else the address its connection "
                           "to the coordinator leaves from"));
  out.push_back(opt_int("cluster", "round_timeout_ms", 30000, 100, 86400000,
                        "a round of the data plane (or the group's forming) "
                        "that takes longer fails, naming the peer"));
}

void add_remote(std::vector<option_spec>& out) {
  out.push_back(opt_string("remote", "bind", "tcp://127.0.0.1:5555", {},
                           "ZeroMQ endpoint the remote environment server (env.id = "
                           "\"remote\", docs/protocol.md) binds its ROUTER socket to: "
                           "tcp://HOST:PORT or ipc://PATH; loopback by default, another "
                           "interface only when written here"));
  out.push_back(opt_int("remote", "obs_dim", 4, 1, 1048576,
                        "floats per observation the clients must send (their "
                        "observation_space)"));
  out.push_back(opt_int("remote", "num_actions", 2, 0, 16777216,
                        "n of the clients' Discrete action space; 0: a Box action space "
                        "of remote.action_dim floats"));
  out.push_back(opt_int("remote", "action_dim", 1, 1, 1048576,
                        "floats per action of a Box action space (remote.num_actions = "
                        "0)"));
  out.push_back(opt_int("remote", "max_envs", 256, 1, 1048576,
                        "environments served at once, over all client sessions (a HELLO "
                        "beyond it is refused with server_full)"));
  out.push_back(opt_int("remote", "min_envs", 1, 1, 1048576,
                        "environments that must have connected before the first session "
                        "is welcomed (HELLOs wait until then); at most remote.max_envs"));
  out.push_back(opt_int("remote", "heartbeat_ms", 1000, 10, 3600000,
                        "a client sends a STEP or PING at least this often (told in "
                        "WELCOME)"));
  out.push_back(
    opt_int("remote", "timeout_ms", 10000, 50, 86400000,
            "a session silent for this long is dropped: its episodes are given "
            "up, their unfinished segments discarded and counted (larger "
            "than heartbeat_ms)"));
  out.push_back(opt_int("remote", "max_errors", 16, 0, 1000000,
                        "malformed messages a session may send; the next one drops it"));
  out.push_back(
    opt_string("remote", "curve_secret_key_file", "", {},
               "file holding the server's CURVE secret key (40 Z85 characters "
               "on its first non-blank line; troupe remote keygen writes one): "
               "clients must use CURVE with the matching public key; empty: "
               "plaintext"));
  out.push_back(
    opt_string("remote", "curve_allowed_clients_file", "", {},
               "with remote.curve_secret_key_file: the client public keys let "
               "in, one Z85 key per line (a note may follow the key after a "
               "space; blank lines are skipped); any other client is refused "
               "and logged"));
}

std::vector<option_spec> build_schema() {
  std::vector<option_spec> out;
  add_run(out);
  add_stats(out);
  add_model(out);
  add_env(out);
  add_algo(out);
  add_cluster(out);
  add_remote(out);
  return out;
}

} // namespace

const std::vector<option_spec>& schema() {
  static const std::vector<option_spec> table = build_schema();
  return table;
}

const std::vector<removed_option>& removed_options() {
  static const std::vector<removed_option> table = {
    {"stats.epsilon",
     "the epsilon of observation normalization is model.obs_norm_eps (runners, "
     "checkpoints and troupe eval all use it); write model.obs_norm_eps instead",
     ""},
    {"env.fail_after_calls",
     "it was a test hook; troupe's tests now fail a runner with a test-only "
     "environment; delete the line",
     ""},
    {"cluster.data_plane",
     "the parameter-server data plane (each gradient to the coordinator and the "
     "weights back) was removed on 2026-11-27, after the all-reduce plane matched "
     "or beat it in every measured case (docs/benchmarks.md); delete the line or "
     "write \"allreduce\"",
     "server"},
  };
  return table;
}

} // namespace troupe::runtime
