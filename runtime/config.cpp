#include "runtime/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "learners/algorithm.hpp"
#include "runtime/toml.hpp"

namespace troupe::runtime {

// -- names and suggestions ---------------------------------------------------

namespace {

// Levenshtein distance of a and b, or any value above `bound` once it is
// sure to exceed it. The rows are reused between calls (an unknown key is
// measured against every name of the schema).
size_t edit_distance(const std::string& a, const std::string& b, size_t bound) {
  thread_local std::vector<size_t> prev, cur;
  prev.resize(b.size() + 1);
  cur.resize(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > bound)
      return bound + 1; // no later row gets smaller
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string format_number(double x) {
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    return fmt::format("{}", static_cast<int64_t>(x));
  return fmt::format("{}", x);
}

const char* type_word(value_type t) {
  switch (t) {
  case value_type::boolean:
    return "a boolean";
  case value_type::integer:
    return "an integer";
  case value_type::floating:
    return "a float";
  case value_type::string:
    return "a string";
  case value_type::int_list:
    return "an array of integers";
  }
  return "a value";
}

const char* type_name(value_type t) {
  switch (t) {
  case value_type::boolean:
    return "bool";
  case value_type::integer:
    return "int";
  case value_type::floating:
    return "float";
  case value_type::string:
    return "string";
  case value_type::int_list:
    return "int[]";
  }
  return "?";
}

// The schema's names ("section.key"), its sections in order, and an index
// from name to option, built once: every key of a file is looked up, and an
// unknown one is compared with every name.
struct schema_index {
  std::vector<std::string> names;
  std::vector<std::string> sections;
  std::unordered_map<std::string, const option_spec*> by_name;
};

const schema_index& index() {
  static const schema_index idx = [] {
    schema_index out;
    for (auto& s : schema()) {
      out.names.push_back(s.name());
      out.by_name.emplace(s.name(), &s);
      if (std::find(out.sections.begin(), out.sections.end(), s.section) ==
          out.sections.end())
        out.sections.push_back(s.section);
    }
    return out;
  }();
  return idx;
}

const std::vector<std::string>& all_names() {
  return index().names;
}

const std::vector<std::string>& all_sections() {
  return index().sections;
}

} // namespace

std::string nearest(const std::string& name, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  const std::string* best = nullptr;
  size_t best_d = std::string::npos;
  std::array<int32_t, 256> counts{}; // of name's bytes
  for (unsigned char ch : name)
    ++counts[ch];
  for (auto& c : candidates) {
    // The distance is at least the difference in length: a candidate that
    // cannot come within the limit, or beat the best so far, is skipped, and
    // a distance is computed only as far as it could still matter. The
    // result is as before: the first nearest name within the limit.
    const size_t gap =
      c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (gap > limit || gap >= best_d)
      continue;
    const size_t bound = std::min(limit, best_d - 1);
    // It is also at least the larger of the two strings' excess byte counts
    // (an edit takes at most one byte from one side's excess and one from the
    // other's), a bound that one pass over each string gives: most names
    // are skipped without the quadratic table (which a fuzzed config file
    // with hundreds of unknown keys spent most of its time in).
    auto diff = counts;
    for (unsigned char ch : c)
      --diff[ch];
    size_t excess_name = 0, excess_c = 0;
    for (int32_t v : diff) {
      if (v > 0)
        excess_name += static_cast<size_t>(v);
      else
        excess_c += static_cast<size_t>(-v);
    }
    if (std::max(excess_name, excess_c) > bound)
      continue;
    auto d = edit_distance(name, c, bound);
    if (d <= bound && d < best_d) {
      best_d = d;
      best = &c;
    }
  }
  return best && best_d <= limit ? *best : std::string{};
}

std::string option_spec::expectation() const {
  std::string out = type_word(type);
  if (!choices.empty()) {
    out = "one of";
    for (size_t i = 0; i < choices.size(); ++i)
      out += fmt::format("{}\"{}\"", i == 0 ? " " : ", ", choices[i]);
    return out;
  }
  if (bounded && (type == value_type::integer || type == value_type::floating ||
                  type == value_type::int_list)) {
    out += fmt::format(" {} {}{}, {}{}",
                       type == value_type::int_list ? "with elements in" : "in",
                       min_exclusive ? "(" : "[", format_number(min), format_number(max),
                       max_exclusive ? ")" : "]");
  }
  return out;
}

const option_spec* find_option(const std::string& name) {
  auto& by_name = index().by_name;
  auto i = by_name.find(name);
  return i == by_name.end() ? nullptr : i->second;
}

namespace {

// The hint for a key that is not in the schema: what to write instead of a
// removed key, or the nearest valid key.
std::string unknown_key_hint(const std::string& name) {
  for (auto& r : removed_options())
    if (r.name == name && r.value.empty())
      return fmt::format(" (removed: {})", r.instead);
  auto hint = nearest(name, all_names());
  return hint.empty() ? std::string{} : fmt::format(" (did you mean '{}'?)", hint);
}

} // namespace

// -- the algorithms' sections ------------------------------------------------

bool is_algorithm_section(const std::string& section) {
  return section.rfind("algo.", 0) == 0;
}

namespace {

// "algo.ppo.clip_coef, algo.a3c.clip_coef": where the algorithms' sections
// have `key`; empty when none has it.
std::string sections_with(const std::string& key) {
  std::string out;
  for (auto& a : learners::algorithms())
    for (auto& h : a.hyperparameters)
      if (key == h.key)
        out += fmt::format("{}[algo.{}]", out.empty() ? "" : ", ", a.name);
  return out;
}

// The keys of `section`, comma-separated.
std::string keys_of(const std::string& section) {
  std::string out;
  for (auto& o : schema())
    if (o.section == section)
      out += fmt::format("{}{}", out.empty() ? "" : ", ", o.key);
  return out;
}

bool algorithm_has(const std::string& algo, const std::string& key) {
  return find_option("algo." + algo + "." + key) != nullptr;
}

// A key of the flat [algo] section of older troupe that is now a key of an
// algorithm's section: where it goes for a run of `algo`.
std::string moved_key_hint(const std::string& key, const std::string& algo) {
  if (algorithm_has(algo, key))
    return fmt::format("algo.{0} has moved to the algorithm's own section: write "
                       "'{0}' under [algo.{1}] (algo.{1}.{0})",
                       key, algo);
  return fmt::format("algo.{0} has moved to {1}; this run's algorithm '{2}' has no "
                     "'{0}' (its section [algo.{2}] has: {3}): delete the line",
                     key, sections_with(key), algo, keys_of("algo." + algo));
}

} // namespace

bool is_moved_algo_key(const std::string& name) {
  if (name.rfind("algo.", 0) != 0 || name.find('.', 5) != std::string::npos)
    return false;
  return !sections_with(name.substr(5)).empty();
}

std::string to_toml(const value& v) {
  struct visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const {
      auto s = fmt::format("{}", d);
      if (s.find_first_of(".eEn") == std::string::npos)
        s += ".0";
      return s;
    }
    // A TOML basic string: quotes, backslashes and control characters
    // (which TOML forbids raw) escaped, so the text always parses back.
    std::string operator()(const std::string& s) const {
      std::string out = "\"";
      for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\r':
          out += "\\r";
          break;
        default:
          if (c < 0x20 || c == 0x7f)
            out += fmt::format("\\u{:04X}", c);
          else
            out += ch;
        }
      }
      return out + "\"";
    }
    std::string operator()(const std::vector<int64_t>& xs) const {
      std::string out = "[";
      for (size_t i = 0; i < xs.size(); ++i)
        out += fmt::format("{}{}", i == 0 ? "" : ", ", xs[i]);
      return out + "]";
    }
  };
  return std::visit(visitor{}, v);
}

// -- config ------------------------------------------------------------------

config::config() {
  const auto& names = all_names();
  for (size_t i = 0; i < names.size(); ++i) {
    values_.emplace(names[i], schema()[i].default_value);
    origins_.emplace(names[i], "default");
  }
}

const value& config::at(const std::string& name) const {
  auto i = values_.find(name);
  TROUPE_CHECK(i != values_.end(), "config has no option '{}'", name);
  return i->second;
}

bool config::get_bool(const std::string& name) const {
  return std::get<bool>(at(name));
}

int64_t config::get_int(const std::string& name) const {
  return std::get<int64_t>(at(name));
}

double config::get_float(const std::string& name) const {
  return std::get<double>(at(name));
}

const std::string& config::get_string(const std::string& name) const {
  return std::get<std::string>(at(name));
}

const std::vector<int64_t>& config::get_int_list(const std::string& name) const {
  return std::get<std::vector<int64_t>>(at(name));
}

const std::string& config::origin(const std::string& name) const {
  auto i = origins_.find(name);
  TROUPE_CHECK(i != origins_.end(), "config has no option '{}'", name);
  return i->second;
}

void config::set(const std::string& name, value v, std::string origin) {
  values_[name] = std::move(v);
  origins_[name] = std::move(origin);
}

std::string config::to_toml() const {
  std::string out;
  std::string section;
  const auto& names = all_names();
  const std::string own = "algo." + get_string("algo.name");
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& s = schema()[i];
    // Of the algorithms' sections, only the run's: another's keys in a
    // config are an error.
    if (is_algorithm_section(s.section) && s.section != own)
      continue;
    if (s.section != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", s.section);
      section = s.section;
    }
    out += fmt::format("{} = {}\n", s.key, runtime::to_toml(at(names[i])));
  }
  return out;
}

// -- validation --------------------------------------------------------------

namespace {

std::string describe_node(const toml::node& n) {
  if (auto b = n.as_boolean())
    return fmt::format("boolean {}", b->get() ? "true" : "false");
  if (auto i = n.as_integer())
    return fmt::format("integer {}", i->get());
  if (auto f = n.as_floating_point())
    return fmt::format("float {}", f->get());
  if (auto s = n.as_string())
    return fmt::format("string \"{}\"", s->get());
  if (n.is_array())
    return "an array";
  if (n.is_table())
    return "a table";
  return "a date or time";
}

bool in_range(const option_spec& s, double x) {
  if (!s.bounded)
    return true;
  if (std::isnan(x))
    return false;
  if (s.min_exclusive ? !(x > s.min) : !(x >= s.min))
    return false;
  if (s.max_exclusive ? !(x < s.max) : !(x <= s.max))
    return false;
  return true;
}

// Converts a TOML node to the spec's type; on failure returns a message
// "expected ..., got ...".
result<value> convert(const option_spec& s, const toml::node& n) {
  auto fail = [&] {
    return make_error(errc::bad_config, "expected {}, got {}", s.expectation(),
                      describe_node(n));
  };
  switch (s.type) {
  case value_type::boolean:
    if (auto b = n.as_boolean())
      return value{b->get()};
    return fail();
  case value_type::integer:
    if (auto i = n.as_integer()) {
      if (!in_range(s, static_cast<double>(i->get())))
        return fail();
      return value{i->get()};
    }
    return fail();
  case value_type::floating: {
    double x;
    if (auto f = n.as_floating_point())
      x = f->get();
    else if (auto i = n.as_integer())
      x = static_cast<double>(i->get());
    else
      return fail();
    if (!std::isfinite(x) || !in_range(s, x))
      return fail();
    return value{x};
  }
  case value_type::string:
    if (auto str = n.as_string()) {
      if (!s.choices.empty() &&
          std::find(s.choices.begin(), s.choices.end(), str->get()) == s.choices.end()) {
        for (auto& r : removed_options())
          if (!r.value.empty() && r.value == str->get() && r.name == s.name())
            return make_error(errc::bad_config, "expected {}, got {} (removed: {})",
                              s.expectation(), describe_node(n), r.instead);
        return fail();
      }
      return value{std::string{str->get()}};
    }
    return fail();
  case value_type::int_list:
    if (auto arr = n.as_array()) {
      std::vector<int64_t> xs;
      for (auto& e : *arr) {
        auto i = e.as_integer();
        if (!i || !in_range(s, static_cast<double>(i->get())))
          return make_error(errc::bad_config, "expected {}, got element {}",
                            s.expectation(), describe_node(e));
        xs.push_back(i->get());
      }
      return value{std::move(xs)};
    }
    return fail();
  }
  return fail();
}

std::string place(const std::string& path, const toml::source_region& src) {
  return fmt::format("{}:{}", path, src.begin.line);
}

// How a file is read: the run's algorithm (algo.name of the file or of an
// override; it decides where a flat [algo] key of older troupe belongs) and
// whether such keys are migrated (a run folder's own config.toml, written by
// an older troupe) or refused (a config a person writes).
struct read_context {
  std::string path;
  std::string algo = "ppo";
  bool migrate = false;
  std::vector<std::string>* migrated = nullptr;
};

// The hint for an unknown key of an algorithm's section: the section it
// belongs to, when it is another algorithm's key.
std::string algorithm_key_hint(const std::string& section, const std::string& key) {
  const std::string elsewhere = sections_with(key);
  if (elsewhere.empty())
    return {};
  return fmt::format(" ('{}' is a key of {}, not of [{}], whose keys are: {})", key,
                     elsewhere, section, keys_of(section));
}

std::string unknown_section(const std::string& where, const std::string& section) {
  const auto& sections = all_sections();
  auto hint = nearest(section, sections);
  return fmt::format("{}: unknown section '[{}]'{}", where, section,
                     hint.empty()
                       ? fmt::format(" (valid sections: {})", fmt::join(sections, ", "))
                       : fmt::format(" (did you mean '[{}]'?)", hint));
}

void check_section(const toml::table& table, const std::string& section,
                   const read_context& ctx, config& cfg,
                   std::vector<std::string>& problems) {
  const auto& sections = all_sections();
  for (auto&& [key, node] : table) {
    std::string name = section + "." + std::string{key.str()};
    auto at = place(ctx.path, key.source());
    if (node.is_table() &&
        std::find(sections.begin(), sections.end(), name) != sections.end()) {
      check_section(*node.as_table(), name, ctx, cfg, problems); // [algo.ppo]
      continue;
    }
    if (node.is_table()) {
      problems.push_back(unknown_section(at, name));
      continue;
    }
    if (section == "algo" && is_moved_algo_key(name)) {
      const std::string k{key.str()};
      if (!ctx.migrate) {
        problems.push_back(fmt::format("{}: {}", at, moved_key_hint(k, ctx.algo)));
        continue;
      }
      // A run folder of an older troupe: the run's algorithm's keys move to
      // its section; another algorithm's were ignored then and are dropped.
      if (!algorithm_has(ctx.algo, k))
        continue;
      name = "algo." + ctx.algo + "." + k;
      if (ctx.migrated)
        ctx.migrated->push_back(fmt::format("algo.{} -> {}", k, name));
    }
    auto spec = find_option(name);
    if (!spec) {
      std::string hint = is_algorithm_section(section)
                           ? algorithm_key_hint(section, std::string{key.str()})
                           : std::string{};
      if (hint.empty())
        hint = unknown_key_hint(name);
      problems.push_back(fmt::format("{}: unknown key '{}'{}", at, name, hint));
      continue;
    }
    auto v = convert(*spec, node);
    if (!v) {
      problems.push_back(fmt::format("{}: {}: {}", at, name, v.err().message));
      continue;
    }
    cfg.set(name, std::move(*v), at);
  }
}

void check_table(const toml::table& root, const read_context& ctx, config& cfg,
                 std::vector<std::string>& problems) {
  const auto& sections = all_sections();
  for (auto&& [section_key, section_node] : root) {
    std::string section{section_key.str()};
    auto where = place(ctx.path, section_key.source());
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      if (!section_node.is_table()) {
        // A top-level key: maybe a key that belongs in a section.
        auto hint = nearest(section, all_names());
        problems.push_back(fmt::format(
          "{}: unknown top-level key '{}'{}", where, section,
          hint.empty()
            ? fmt::format(" (keys live in sections: {})", fmt::join(sections, ", "))
            : fmt::format(" (did you mean '{}' in [{}]?)", hint,
                          hint.substr(0, hint.rfind('.')))));
        continue;
      }
      problems.push_back(unknown_section(where, section));
      continue;
    }
    auto table = section_node.as_table();
    if (!table) {
      problems.push_back(fmt::format("{}: '{}' must be a table ([{}]), got {}", where,
                                     section, section, describe_node(section_node)));
      continue;
    }
    check_section(*table, section, ctx, cfg, problems);
  }
}

// The hint for an unknown name of a file or an override.
std::string unknown_name_hint(const std::string& name, const std::string& algo) {
  if (is_moved_algo_key(name))
    return fmt::format(" ({})", moved_key_hint(name.substr(5), algo));
  const auto dot = name.rfind('.');
  if (dot != std::string::npos && is_algorithm_section(name.substr(0, dot)))
    if (auto hint = algorithm_key_hint(name.substr(0, dot), name.substr(dot + 1));
        !hint.empty())
      return hint;
  return unknown_key_hint(name);
}

void apply_override(const std::string& text, const std::string& algo, config& cfg,
                    std::vector<std::string>& problems) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    problems.push_back(fmt::format("--set {}: expected section.key=value", text));
    return;
  }
  std::string name = text.substr(0, eq);
  std::string raw = text.substr(eq + 1);
  auto spec = find_option(name);
  if (!spec) {
    problems.push_back(fmt::format("--set {}: unknown key '{}'{}", text, name,
                                   unknown_name_hint(name, algo)));
    return;
  }
  // The value is read as a TOML value; a bare word counts as a string.
  toml::table doc;
  bool parsed = false;
  try {
    doc = toml::parse("v = " + raw);
    parsed = doc.contains("v");
  } catch (const toml::parse_error&) {
    parsed = false;
  }
  if (!parsed) {
    // As a string, escaped the way to_toml writes it: toml++ then checks
    // that it is UTF-8, which a TOML file (and the run's config.toml) needs.
    try {
      doc = toml::parse("v = " + runtime::to_toml(value{raw}));
    } catch (const toml::parse_error& e) {
      problems.push_back(fmt::format("--set {}: {}: expected a number, a boolean or a "
                                     "UTF-8 string, got bytes that are none ({})",
                                     text, name, e.description()));
      return;
    }
  }
  auto v = convert(*spec, *doc.get("v"));
  if (!v) {
    problems.push_back(fmt::format("--set {}: {}: {}", text, name, v.err().message));
    return;
  }
  cfg.set(name, std::move(*v), "--set");
}

// A key of an algorithm's section other than the run's, set in the file or
// by an override, is an error: it would be ignored.
void check_algorithm_sections(const config& cfg, std::vector<std::string>& problems) {
  const std::string algo = cfg.get_string("algo.name");
  const std::string own = "algo." + algo;
  for (auto& o : schema()) {
    if (!is_algorithm_section(o.section) || o.section == own)
      continue;
    const std::string name = o.name();
    const auto& origin = cfg.origin(name);
    if (origin == "default")
      continue;
    problems.push_back(fmt::format(
      "{}: {} is a key of [{}], but this run's algorithm is '{}' (algo.name, {}): its "
      "hyperparameters are in [{}] ({}); write the key there if '{}' has it, or delete "
      "the line",
      origin == "--set" ? "--set " + name : origin, name, o.section, algo,
      cfg.origin("algo.name"), own, keys_of(own), algo));
  }
}

// model.norm_update = "step" merges a batch's own steps into the statistics
// by their counts: an ema stream has no such weights, and a frozen one must
// not change.
void check_norm_update(const config& cfg, std::vector<std::string>& problems) {
  if (cfg.get_string("model.norm_update") != "step")
    return;
  auto where = [&](const std::string& name) {
    const auto& origin = cfg.origin(name);
    return origin == "--set" ? "--set " + name : origin;
  };
  if (cfg.get_string("stats.mode") == "ema")
    problems.push_back(fmt::format(
      "{}: model.norm_update = \"step\" merges each batch's steps into the "
      "statistics by their counts, which stats.mode = \"ema\" ({}) does not keep; "
      "set one of them otherwise",
      where("model.norm_update"), where("stats.mode")));
  if (cfg.get_int("stats.freeze_after") > 0)
    problems.push_back(
      fmt::format("{}: model.norm_update = \"step\" would change the statistics that "
                  "stats.freeze_after = {} ({}) freezes; set one of them otherwise",
                  where("model.norm_update"), cfg.get_int("stats.freeze_after"),
                  where("stats.freeze_after")));
}

// The run's algorithm as the overrides (the last one wins) or the file name
// it; "ppo" (the default) otherwise. A flat [algo] key of older troupe is
// placed by it.
std::string run_algorithm(const toml::table* root,
                          const std::vector<std::string>& overrides) {
  std::string algo = std::get<std::string>(find_option("algo.name")->default_value);
  if (root)
    if (auto v = (*root)["algo"]["name"].value<std::string>())
      algo = *v;
  for (auto& o : overrides)
    if (o.rfind("algo.name=", 0) == 0) {
      algo = o.substr(10);
      if (algo.size() >= 2 && algo.front() == '"' && algo.back() == '"')
        algo = algo.substr(1, algo.size() - 2);
    }
  return algo;
}

result<config> finish(config cfg, const std::string& algo,
                      const std::vector<std::string>& overrides,
                      std::vector<std::string> problems) {
  for (auto& o : overrides)
    apply_override(o, algo, cfg, problems);
  check_algorithm_sections(cfg, problems);
  check_norm_update(cfg, problems);
  // Reward normalization discounts with algo.gamma unless told otherwise;
  // the resolved value is written to the run's config.toml, so a resume
  // keeps it.
  if (cfg.origin("model.reward_norm_gamma") == "default")
    cfg.set("model.reward_norm_gamma", cfg.get_float("algo.gamma"),
            "default (algo.gamma)");
  if (!problems.empty())
    return error{errc::bad_config, fmt::format("{}", fmt::join(problems, "\n"))};
  return cfg;
}

result<config> parse_text(const std::string& text, const std::string& path,
                          const std::vector<std::string>& overrides, bool migrate,
                          std::vector<std::string>* migrated) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return make_error(errc::bad_config, "{}:{}: invalid TOML: {}", path,
                      e.source().begin.line, e.description());
  }
  config cfg;
  cfg.set_source_path(path);
  std::vector<std::string> problems;
  read_context ctx;
  ctx.path = path;
  ctx.algo = run_algorithm(&root, overrides);
  ctx.migrate = migrate;
  ctx.migrated = migrated;
  check_table(root, ctx, cfg, problems);
  // toml++ keeps keys sorted by name; report in file order instead.
  auto line_of = [&](const std::string& p) {
    auto rest = p.substr(std::min(p.size(), path.size() + 1));
    return std::atoi(rest.c_str());
  };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](auto& a, auto& b) { return line_of(a) < line_of(b); });
  return finish(std::move(cfg), ctx.algo, overrides, std::move(problems));
}

// The file's text: errc::not_found when there is no such file (or it is a
// folder), errc::io_error when the system refuses to read one that exists.
result<std::string> read_text(const std::string& path) {
  std::error_code ec;
  const auto kind = std::filesystem::status(path, ec).type();
  if (kind == std::filesystem::file_type::not_found)
    return make_error(errc::not_found, "{}: no such config file", path);
  if (kind == std::filesystem::file_type::directory)
    return make_error(errc::not_found, "{}: is a folder, not a config file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::io_error, "{}: cannot open config file", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return make_error(errc::io_error, "{}: cannot read config file", path);
  return text.str();
}

} // namespace

result<config> parse_config(const std::string& text, const std::string& path,
                            const std::vector<std::string>& overrides) {
  return parse_text(text, path, overrides, false, nullptr);
}

result<config> load_config(const std::string& path,
                           const std::vector<std::string>& overrides) {
  auto text = read_text(path);
  if (!text)
    return text.err();
  return parse_text(*text, path, overrides, false, nullptr);
}

result<config> load_run_config(const std::string& path,
                               const std::vector<std::string>& overrides,
                               std::vector<std::string>* migrated) {
  auto text = read_text(path);
  if (!text)
    return text.err();
  return parse_text(*text, path, overrides, true, migrated);
}

result<config> default_config(const std::vector<std::string>& overrides) {
  return finish(config{}, run_algorithm(nullptr, overrides), overrides, {});
}

std::string describe_schema() {
  std::string out;
  std::string section;
  for (auto& s : schema()) {
    if (s.section != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", s.section);
      section = s.section;
    }
    out += fmt::format("  {:<28} {:<7} default {:<14} {}\n", s.name(), type_name(s.type),
                       to_toml(s.default_value), s.expectation());
    out += fmt::format("  {:<28} {}\n", "", s.description);
  }
  return out;
}

} // namespace troupe::runtime
