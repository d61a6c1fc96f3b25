// Experiment configuration: TOML files validated against one schema table per
// section. The same table drives validation, defaults, `troupe config
// describe` and the resolved config written into a run folder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "base/error.hpp"

namespace troupe::runtime {

/// The type of a config option.
enum class value_type { boolean, integer, floating, string, int_list };

/// A config value; the alternative matches the option's value_type.
using value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

/// One option of the schema: name, type, default, allowed values, meaning.
struct option_spec {
  std::string section;                  ///< table name, e.g. "stats"
  std::string key;                      ///< key inside the table, e.g. "momentum"
  value_type type = value_type::string; ///< expected type
  value default_value;                  ///< used when the file does not set the key
  double min = 0;                       ///< lower bound for numbers (and list elements)
  double max = 0;                       ///< upper bound for numbers (and list elements)
  bool bounded = false;                 ///< whether min/max apply
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices; ///< allowed strings; empty: any string
  std::string description;          ///< one line

  /// "section.key".
  std::string name() const { return section + "." + key; }
  /// Human description of the allowed values, e.g. "a float in [0, 1)".
  std::string expectation() const;
};

/// Every option of every section, in the order they are described.
const std::vector<option_spec>& schema();

/// Looks an option up by "section.key"; nullptr when unknown.
const option_spec* find_option(const std::string& name);

/// An option that no longer exists, or a value an option no longer takes,
/// with what to write instead.
struct removed_option {
  std::string name;    ///< "section.key" it had
  std::string instead; ///< what to write instead, one sentence
  std::string value;   ///< the string value it no longer takes; empty: the key went
};

/// Whether `section` is an algorithm's own section ("algo.ppo").
bool is_algorithm_section(const std::string& section);

/// Whether `name` is a key of the flat [algo] section of an older troupe that
/// is now a key of an algorithm's section ("algo.clip_coef").
bool is_moved_algo_key(const std::string& name);

/// Every removed option and value (config files and --set that use one get
/// `instead`).
const std::vector<removed_option>& removed_options();

/// A validated, resolved configuration: every schema option has a value.
class config {
public:
  /// The defaults of every option.
  config();

  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_int_list(const std::string& name) const;

  /// Where a value came from: "FILE:LINE", "--set" or "default".
  const std::string& origin(const std::string& name) const;

  /// Sets a value that has already been validated against its spec.
  void set(const std::string& name, value v, std::string origin);

  /// The config file it was loaded from (empty for defaults only).
  const std::string& source_path() const noexcept { return source_path_; }
  void set_source_path(std::string path) { source_path_ = std::move(path); }

  /// The resolved config as TOML, sections in schema order.
  std::string to_toml() const;

private:
  const value& at(const std::string& name) const;

  std::map<std::string, value> values_;
  std::map<std::string, std::string> origins_;
  std::string source_path_;
};

/// Loads and validates FILE with `--set section.key=value` overrides applied,
/// or errc::bad_config listing every problem by file:line (or override), key,
/// expectation and value, errc::not_found or errc::io_error for the file.
result<config> load_config(const std::string& path,
                           const std::vector<std::string>& overrides = {});

/// Loads a run folder's own config.toml as load_config does, migrating an
/// older troupe's flat [algo] keys instead of refusing them and telling each
/// move to `migrated`, which may be null (docs/training.md, "Hyperparameters,
/// defaults and sources").
result<config> load_run_config(const std::string& path,
                               const std::vector<std::string>& overrides,
                               std::vector<std::string>* migrated);

/// The defaults with overrides applied (no file).
result<config> default_config(const std::vector<std::string>& overrides = {});

/// Validates a TOML document given as text; `path` names it in messages.
result<config> parse_config(const std::string& text, const std::string& path,
                            const std::vector<std::string>& overrides = {});

/// A table of every option: name, type, default, allowed values, description.
std::string describe_schema();

/// Renders a value as TOML.
std::string to_toml(const value& v);

/// Nearest name among candidates by edit distance; empty if none is close.
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

} // namespace troupe::runtime
