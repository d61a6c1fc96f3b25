// The schema: one table per section. Adding an option is adding one line
// here; validation, defaults and `troupe config describe` follow from it.
#include "runtime/config.hpp"

#include <limits>

namespace troupe::runtime {

namespace {

constexpr double int_max = 9007199254740991.0; // 2^53 - 1

option_spec make_spec(const char* section, const char* key, value_type type,
                      value def) {
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

option_spec opt_int(const char* section, const char* key, int64_t def,
                    double min, double max, const char* description) {
  auto s = make_spec(section, key, value_type::integer, def);
  s.min = min;
  s.max = max;
  s.bounded = true;
  s.description = description;
  return s;
}

option_spec opt_float(const char* section, const char* key, double def,
                      double min, double max, const char* description,
                      bool min_exclusive = false, bool max_exclusive = false) {
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
                       std::vector<std::string> choices,
                       const char* description) {
  auto s = make_spec(section, key, value_type::string, std::string{def});
  s.choices = std::move(choices);
  s.description = description;
  return s;
}

option_spec opt_int_list(const char* section, const char* key,
                                          std::vector<int64_t> def, double min,
                                          double max, const char* description) {
  auto s = make_spec(section, key, value_type::int_list, std::move(def));
  s.min = min;
  s.max = max;
  s.bounded = true;
  s.description = description;
  return s;
}

// -- [run] -------------------------------------------------------------------

void add_run(std::vector<option_spec>& out) {
  out.push_back(opt_string("run", "name", "troupe", {},
                           "name of the run; the run folder is <output_dir>/<name>-<timestamp>"));
  out.push_back(opt_int("run", "seed", 1, 0, 4294967295.0,
                        "seed of every random stream (env i is seeded with seed + i)"));
  out.push_back(opt_string("run", "output_dir", "runs", {},
                           "folder that receives run folders"));
  out.push_back(opt_string("run", "device", "auto", {"auto", "cpu", "cuda"},
                           "where learners compute: auto uses a GPU when the CUDA runtime finds one"));
}

// -- [stats] -----------------------------------------------------------------

void add_stats(std::vector<option_spec>& out) {
  out.push_back(opt_string("stats", "mode", "cumulative", {"cumulative", "ema"},
                           "cumulative: exact moments of all data seen; ema: running = momentum*running + (1-momentum)*batch"));
  out.push_back(opt_float("stats", "momentum", 0.99, 0.0, 1.0,
                          "weight of the running statistics in ema mode", false, true));
  out.push_back(opt_float("stats", "epsilon", 1e-8, 0.0, 1.0,
                          "added to the variance before the square root when normalizing", true, false));
  out.push_back(opt_int("stats", "publish_every_merges", 8, 1, int_max,
                        "the keeper publishes a snapshot after this many merges"));
  out.push_back(opt_int("stats", "publish_interval_ms", 10, 0, 3600000,
                        "...or this long after an unpublished merge (0: only by count)"));
}

// -- [model] -----------------------------------------------------------------

void add_model(std::vector<option_spec>& out) {
  out.push_back(opt_int_list("model", "hidden", {64, 64}, 1, 65536,
                             "widths of the hidden layers of the actor and of the critic"));
  out.push_back(opt_string("model", "activation", "tanh", {"tanh", "relu"},
                           "activation after every hidden layer"));
  out.push_back(opt_bool("model", "obs_norm", false,
                         "normalize observations with the global running statistics"));
  out.push_back(opt_float("model", "obs_norm_eps", 1e-8, 0.0, 1.0,
                          "added to the variance before the square root in the observation normalizer",
                          true, false));
  out.push_back(opt_float("model", "obs_norm_clip", 10.0, 0.0, 1e6,
                          "normalized observations are clipped to [-clip, clip]", true, false));
  out.push_back(opt_string("model", "batch_norm", "none", {"none", "global", "local"},
                           "batch norm between hidden layers: global running statistics, per-batch (naive baseline), or none"));
  out.push_back(opt_float("model", "batch_norm_eps", 1e-5, 0.0, 1.0,
                          "added to the variance before the square root in batch norm", true, false));
  out.push_back(opt_float("model", "batch_norm_momentum", 0.1, 0.0, 1.0,
                          "local batch norm: running = (1 - momentum)*running + momentum*batch (PyTorch's convention)",
                          true, false));
}

std::vector<option_spec> build_schema() {
  std::vector<option_spec> out;
  add_run(out);
  add_stats(out);
  add_model(out);
  return out;
}

} // namespace

const std::vector<option_spec>& schema() {
  static const std::vector<option_spec> table = build_schema();
  return table;
}

} // namespace troupe::runtime
