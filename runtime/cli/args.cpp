#include "runtime/cli/args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/config.hpp"

namespace troupe::runtime {

std::optional<std::string> parsed_args::get(const std::string& name) const {
  auto i = values_.find(name);
  if (i == values_.end())
    return std::nullopt;
  return i->second;
}

std::vector<std::string> parsed_args::all(const std::string& name) const {
  std::vector<std::string> out;
  auto [lo, hi] = values_.equal_range(name);
  for (auto i = lo; i != hi; ++i)
    out.push_back(i->second);
  return out;
}

result<int64_t> parsed_args::get_int(const std::string& name, int64_t fallback,
                                     int64_t min, int64_t max) const {
  auto v = get(name);
  if (!v)
    return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || x < min || x > max)
    return make_error(errc::invalid_argument,
                      "--{}: expected an integer in [{}, {}], got '{}'", name, min, max,
                      *v);
  return static_cast<int64_t>(x);
}

result<double> parsed_args::get_float(const std::string& name, double fallback,
                                      double min, double max) const {
  auto v = get(name);
  if (!v)
    return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    return make_error(errc::invalid_argument,
                      "--{}: expected a number in [{}, {}], got '{}'", name, min, max,
                      *v);
  return x;
}

result<parsed_args> parse_args(const std::string& command,
                               const std::vector<std::string>& args,
                               const std::vector<arg_spec>& specs) {
  parsed_args out;
  auto find = [&](const std::string& name) -> const arg_spec* {
    for (auto& s : specs)
      if (s.name == name)
        return &s;
    return nullptr;
  };
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (options_done || a.size() < 2 || a.compare(0, 2, "--") != 0) {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto spec = find(name);
    if (!spec) {
      std::vector<std::string> names;
      for (auto& s : specs)
        names.push_back(s.name);
      auto hint = nearest(name, names);
      std::string valid;
      for (auto& s : specs)
        valid += fmt::format("{}--{}", valid.empty() ? "" : ", ", s.name);
      return make_error(
        errc::invalid_argument, "{}: unknown option '--{}'{} (valid: {})", command, name,
        hint.empty() ? std::string{} : fmt::format(", did you mean '--{}'?", hint),
        valid.empty() ? "none" : valid);
    }
    if (!spec->takes_value) {
      if (inline_value)
        return make_error(errc::invalid_argument,
                          "{}: option '--{}' takes no value, got '{}'", command, name,
                          *inline_value);
      out.add(name, "");
      continue;
    }
    std::string v;
    if (inline_value) {
      v = *inline_value;
    } else if (i + 1 < args.size()) {
      v = args[++i];
    } else {
      return make_error(errc::invalid_argument, "{}: option '--{}' needs a value",
                        command, name);
    }
    if (!spec->repeatable && out.get(name))
      return make_error(errc::invalid_argument, "{}: option '--{}' given more than once",
                        command, name);
    out.add(name, std::move(v));
  }
  return out;
}

std::string describe_args(const std::vector<arg_spec>& specs) {
  std::string out;
  for (auto& s : specs) {
    auto head = fmt::format("--{}{}", s.name, s.takes_value ? " VALUE" : "");
    out += fmt::format("  {:<24} {}\n", head, s.help);
  }
  return out;
}

} // namespace troupe::runtime
