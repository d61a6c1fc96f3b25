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

[[maybe_unused]] option_spec opt_bool(const char* section, const char* key, bool def,
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

[[maybe_unused]] option_spec opt_int_list(const char* section, const char* key,
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

std::vector<option_spec> build_schema() {
  std::vector<option_spec> out;
  add_run(out);
  add_stats(out);
  return out;
}

} // namespace

const std::vector<option_spec>& schema() {
  static const std::vector<option_spec> table = build_schema();
  return table;
}

} // namespace troupe::runtime
