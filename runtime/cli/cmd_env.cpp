// `troupe env list` and `troupe env replay`: the registered environments, and
// replaying actions from a given internal state (the black-box face of the
// environments, for comparing trajectories with Gymnasium's).
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "envs/registry.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    parts.push_back(trim(s.substr(start, comma - start)));
    if (comma == std::string::npos)
      return parts;
    start = comma + 1;
  }
}

// A whole string as a double; nullopt unless it is one number.
std::optional<double> parse_double(const std::string& s) {
  if (s.empty())
    return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || errno == ERANGE)
    return std::nullopt;
  return v;
}

// The action on one line of an actions file: an integer for a Discrete space,
// comma-separated numbers for a Box.
result<std::vector<float>> parse_action(const std::string& text, const envs::space& as) {
  if (as.kind == envs::space_kind::discrete) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE)
      return make_error(errc::bad_input, "expected an integer action for {}, got '{}'",
                        as.describe(), text);
    if (v < 0 || v >= as.n)
      return make_error(errc::invalid_argument,
                        "action {} is outside {}: expected an integer in [0, {}]", v,
                        as.describe(), as.n - 1);
    return std::vector<float>{static_cast<float>(v)};
  }
  auto parts = split_commas(text);
  if (parts.size() != as.size())
    return make_error(errc::bad_input,
                      "expected {} comma-separated number(s) for {}, got {} in '{}'",
                      as.size(), as.describe(), parts.size(), text);
  std::vector<float> action;
  for (auto& p : parts) {
    auto v = parse_double(p);
    if (!v)
      return make_error(errc::bad_input, "'{}' is not a number", p);
    action.push_back(static_cast<float>(*v));
  }
  if (auto ok = as.check_action(action.data()); !ok)
    return ok.err();
  return action;
}

// For people: "[x0, x1, ...]" with 9 significant digits per number.
std::string text_list(const std::vector<double>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += fmt::format("{}{:.9g}", i ? ", " : "", xs[i]);
  return out + "]";
}

// The comma-separated finite numbers of option `option`; the error names the
// option, the value's position and its text.
result<std::vector<double>> parse_numbers(const char* option, const std::string& text) {
  std::vector<double> out;
  for (auto& part : split_commas(text)) {
    auto v = parse_double(part);
    if (!v || !std::isfinite(*v))
      return make_error(errc::invalid_argument,
                        "{}: value {} '{}' is not a finite number", option,
                        out.size() + 1, part);
    out.push_back(*v);
  }
  return out;
}

} // namespace

int cmd_env_list(const args_t& args) {
  auto parsed = parse_args("troupe env list", args, {});
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (!parsed->positional.empty())
    return fail(exit_bad_input, fmt::format("troupe env list: unexpected argument '{}'",
                                            parsed->positional[0]));
  std::string out;
  for (auto& r : envs::registry()) {
    const auto& s = r.spec;
    out += fmt::format("{}\n  observation  {}\n  action       {}\n  time limit   {} "
                       "steps\n  state        ({})\n",
                       s.id, s.observation_space.describe(), s.action_space.describe(),
                       s.max_episode_steps, fmt::join(s.state_names, ", "));
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

int cmd_env_replay(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"env", true, false, "environment id (see troupe env list)"},
    {"state", true, false,
     "internal state V1,V2,... in Gymnasium's env.unwrapped.state order"},
    {"qpos", true, false, "MuJoCo tasks, instead of --state: the positions data.qpos"},
    {"qvel", true, false, "MuJoCo tasks, with --qpos: the velocities data.qvel"},
    {"qacc-warmstart", true, false,
     "MuJoCo tasks, with --qpos: the solver's warm start data.qacc_warmstart (default "
     "zeros)"},
    {"elapsed", true, false, "steps already taken, for the time limit (default 0)"},
    {"actions", true, false, "file with one action per line"},
    {"json", false, false, "print one JSON object per step"},
  };
  const char* usage =
    "usage: troupe env replay --env ID (--state=V1,V2,... | --qpos=... --qvel=... "
    "[--qacc-warmstart=...]) [--elapsed N] --actions FILE [--json]";
  auto parsed = parse_args("troupe env replay", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (!parsed->positional.empty())
    return fail(exit_bad_input,
                fmt::format("troupe env replay: unexpected argument '{}'\n{}",
                            parsed->positional[0], usage));
  for (const char* required : {"env", "actions"})
    if (!parsed->get(required))
      return fail(exit_bad_input, fmt::format("troupe env replay: --{} is required\n{}",
                                              required, usage));
  const bool by_parts =
    parsed->get("qpos") || parsed->get("qvel") || parsed->get("qacc-warmstart");
  if (by_parts && parsed->get("state"))
    return fail(exit_bad_input,
                fmt::format("troupe env replay: give --state or --qpos and --qvel, not "
                            "both\n{}",
                            usage));
  if (!by_parts && !parsed->get("state"))
    return fail(
      exit_bad_input,
      fmt::format("troupe env replay: --state (or, for a MuJoCo task, --qpos and "
                  "--qvel) is required\n{}",
                  usage));
  if (by_parts && (!parsed->get("qpos") || !parsed->get("qvel")))
    return fail(
      exit_bad_input,
      fmt::format("troupe env replay: --qpos and --qvel go together\n{}", usage));

  auto e = envs::make_env(*parsed->get("env"));
  if (!e)
    return fail(exit_bad_input, fmt::format("--env: {}", e.err().message));
  auto& environment = **e;
  const auto& spec = environment.spec();

  // -- state --------------------------------------------------------------
  std::vector<double> state;
  if (!by_parts) {
    auto values = parse_numbers("--state", *parsed->get("state"));
    if (!values)
      return fail(exit_bad_input, values.err().message);
    state = std::move(*values);
  } else {
    // A MuJoCo task's state is qpos.*, qvel.*, then qacc_warmstart.* (its
    // state names say how many of each).
    const char* parts[] = {"qpos", "qvel", "qacc_warmstart"};
    const char* options[] = {"--qpos", "--qvel", "--qacc-warmstart"};
    for (int k = 0; k < 3; ++k) {
      std::vector<std::string> names;
      for (auto& n : spec.state_names)
        if (n.rfind(std::string{parts[k]} + ".", 0) == 0)
          names.push_back(n);
      if (names.empty())
        return fail(exit_bad_input,
                    fmt::format("{}: {} is not a MuJoCo task (its state is {}); give "
                                "--state",
                                options[k], spec.id, fmt::join(spec.state_names, ", ")));
      const auto text = parsed->get(options[k] + 2);
      std::vector<double> values(names.size(), 0.0); // warm start: zeros by default
      if (text) {
        auto read = parse_numbers(options[k], *text);
        if (!read)
          return fail(exit_bad_input, read.err().message);
        if (read->size() != names.size())
          return fail(exit_bad_input, fmt::format("{}: {} has {} values ({}), got {}",
                                                  options[k], spec.id, names.size(),
                                                  fmt::join(names, ", "), read->size()));
        values = std::move(*read);
      }
      state.insert(state.end(), values.begin(), values.end());
    }
    if (state.size() < spec.state_dim())
      return fail(exit_bad_input,
                  fmt::format("--qpos: {}'s state also holds {} (what MuJoCo's last step "
                              "left); give the whole state with --state",
                              spec.id,
                              fmt::join(spec.state_names.begin() +
                                          static_cast<std::ptrdiff_t>(state.size()),
                                        spec.state_names.end(), ", ")));
  }
  if (state.size() != spec.state_dim())
    return fail(exit_bad_input,
                fmt::format("--state: {} has {} state values ({}), got {}", spec.id,
                            spec.state_dim(), fmt::join(spec.state_names, ", "),
                            state.size()));
  auto elapsed = parsed->get_int("elapsed", 0, 0, INT_MAX - 1);
  if (!elapsed)
    return fail(exit_bad_input, elapsed.err().message);

  // -- actions: the whole file is checked before the first step -----------
  const std::string path = *parsed->get("actions");
  std::ifstream in(path);
  if (!in)
    return fail(exit_bad_input, fmt::format("--actions: cannot read '{}': {}", path,
                                            std::strerror(errno)));
  std::vector<std::vector<float>> actions;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    auto text = trim(line);
    if (text.empty() || text[0] == '#')
      continue;
    auto action = parse_action(text, spec.action_space);
    if (!action)
      return fail(exit_bad_input,
                  fmt::format("{}:{}: {}", path, line_no, action.err().message));
    actions.push_back(std::move(*action));
  }
  if (in.bad())
    return fail(exit_bad_input, fmt::format("--actions: error reading '{}'", path));

  std::vector<float> obs(spec.observation_space.size());
  if (auto ok = environment.set_state(state, obs.data()); !ok)
    return fail(exit_bad_input, fmt::format("--state: {}", ok.err().message));
  environment.set_elapsed_steps(static_cast<int>(*elapsed));

  const bool as_json = parsed->flag("json");
  if (!as_json)
    std::printf("%s from state %s, %d step(s) elapsed, %zu action(s)\n", spec.id.c_str(),
                text_list(state).c_str(), static_cast<int>(*elapsed), actions.size());
  std::string stop = "end of actions";
  size_t step_no = 0;
  for (auto& action : actions) {
    auto r = environment.step(action.data(), obs.data());
    if (!r) // actions were checked above; kept for safety at the boundary
      return fail(exit_bad_input,
                  fmt::format("{}: step {}: {}", path, step_no + 1, r.err().message));
    ++step_no;
    std::vector<double> obs64(obs.begin(), obs.end());
    if (as_json) {
      json line;
      line["obs"] = obs64;
      line["reward"] = r->reward;
      line["terminated"] = r->terminated;
      line["truncated"] = r->truncated;
      line["state"] = environment.state();
      std::fputs(json_line(line).c_str(), stdout);
    } else {
      std::printf(
        "step %zu  action %s  reward %.9g%s%s\n  obs   %s\n  state %s\n", step_no,
        text_list(std::vector<double>(action.begin(), action.end())).c_str(), r->reward,
        r->terminated ? "  terminated" : "", r->truncated ? "  truncated" : "",
        text_list(obs64).c_str(), text_list(environment.state()).c_str());
    }
    if (r->terminated || r->truncated) {
      stop = r->terminated ? "terminated" : "truncated";
      break;
    }
  }
  if (!as_json)
    std::printf("stopped after %zu step(s): %s\n", step_no, stop.c_str());
  return 0;
}

} // namespace troupe::runtime
