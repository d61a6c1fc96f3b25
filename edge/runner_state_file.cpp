#include "edge/runner_state_file.hpp"

#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "envs/registry.hpp"
#include "learners/safetensors.hpp"

namespace troupe::edge {

using actors::env_runner_state;

namespace {

using learners::st_dtype;
using learners::st_file;
using learners::st_tensor;

// The counters tensor holds env_runner_status's counters in this order.
constexpr const char* counter_names[] = {"batches", "env_steps", "episodes", "non_finite",
                                         "deltas_sent"};
constexpr size_t counter_count = 5;

std::string prefix(size_t k) {
  return fmt::format("runner.{}.", k);
}

// uint64 values are stored in I64 tensors bit for bit (safetensors has no U64
// that every reader knows).
template <class T>
st_tensor bits_i64(std::string name, std::vector<int64_t> shape, const T* values,
                   size_t count) {
  std::vector<int64_t> out(count);
  for (size_t k = 0; k < count; ++k) {
    const uint64_t u = static_cast<uint64_t>(values[k]);
    std::memcpy(&out[k], &u, sizeof(u));
  }
  return st_tensor::from_i64(std::move(name), std::move(shape), out.data());
}

st_tensor bytes_u8(std::string name, const std::vector<uint8_t>& values) {
  st_tensor t;
  t.name = std::move(name);
  t.dtype = st_dtype::u8;
  t.shape = {static_cast<int64_t>(values.size())};
  t.bytes.resize(values.size());
  if (!values.empty())
    std::memcpy(t.bytes.data(), values.data(), values.size());
  return t;
}

// Whether the arrays of `s` match its number of environments.
status check_sizes(const env_runner_state& s, size_t k) {
  const auto& e = s.env;
  const size_t n = e.num_envs;
  auto bad = [&](const char* field, size_t want, size_t got) {
    return make_error(
      errc::dimension_mismatch,
      "runner {} ('{}'): {} must hold {} values for {} environments, got {}", k, s.runner,
      field, want, n, got);
  };
  if (s.env_id != e.env_id)
    return make_error(errc::invalid_argument,
                      "runner {} ('{}'): env_id '{}' differs from env.env_id '{}'", k,
                      s.runner, s.env_id, e.env_id);
  if (n == 0)
    return make_error(errc::invalid_argument, "runner {} ('{}'): num_envs must be >= 1",
                      k, s.runner);
  if (!e.with_state) {
    for (auto [field, size] : {std::pair<const char*, size_t>{"env.rng", e.rng.size()},
                               {"env.state", e.state.size()},
                               {"env.elapsed_steps", e.elapsed_steps.size()}})
      if (size != 0)
        return make_error(
          errc::invalid_argument,
          "runner {} ('{}'): {} must be empty when the environments saved "
          "no state (env.with_state false), got {} values",
          k, s.runner, field, size);
  } else if (e.rng.size() != 4 * n) {
    return bad("env.rng", 4 * n, e.rng.size());
  } else if (e.state.size() % n != 0 || e.state.empty()) {
    return make_error(errc::dimension_mismatch,
                      "runner {} ('{}'): env.state must hold a positive multiple of {} "
                      "values (one state per environment), got {}",
                      k, s.runner, n, e.state.size());
  } else if (e.elapsed_steps.size() != n) {
    return bad("env.elapsed_steps", n, e.elapsed_steps.size());
  }
  for (auto [field, size] :
       {std::pair<const char*, size_t>{"env.rewards", e.rewards.size()},
        {"env.terminated", e.terminated.size()},
        {"env.truncated", e.truncated.size()},
        {"env.autoreset", e.autoreset.size()},
        {"episode_return", s.episode_return.size()},
        {"episode_length", s.episode_length.size()}})
    if (size != n)
      return bad(field, n, size);
  if (!s.discounted_return.empty() && s.discounted_return.size() != n)
    return bad("discounted_return", n, s.discounted_return.size());
  return {};
}

// Parses a decimal metadata value.
std::optional<uint64_t> parse_count(const std::string& text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
    return std::nullopt;
  return v;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

} // namespace

status save_runner_states(const std::string& path,
                          const std::vector<actors::env_runner_state>& states) {
  st_file file;
  file.metadata["format"] = runner_states_format;
  file.metadata["version"] = std::to_string(runner_states_version);
  file.metadata["runners"] = std::to_string(states.size());
  file.metadata["counters"] = fmt::format("{}", fmt::join(counter_names, ","));
  for (size_t k = 0; k < states.size(); ++k) {
    const auto& s = states[k];
    if (auto ok = check_sizes(s, k); !ok)
      return make_error(ok.err().code, "{}: cannot save runner states: {}", path,
                        ok.err().message);
    const auto& e = s.env;
    const auto n = static_cast<int64_t>(e.num_envs);
    const auto dim = static_cast<int64_t>(e.state.size() / e.num_envs);
    const std::string p = prefix(k);
    file.metadata[p + "name"] = s.runner;
    file.metadata[p + "env_id"] = s.env_id;
    file.metadata[p + "num_envs"] = std::to_string(e.num_envs);
    file.metadata[p + "env_state"] = e.with_state ? "saved" : "none";
    auto& t = file.tensors;
    if (e.with_state) {
      t.push_back(bits_i64(p + "env.rng", {n, 4}, e.rng.data(), e.rng.size()));
      t.push_back(st_tensor::from_f64(p + "env.state", {n, dim}, e.state.data()));
      t.push_back(bits_i64(p + "env.elapsed_steps", {n}, e.elapsed_steps.data(),
                           e.elapsed_steps.size()));
    }
    t.push_back(st_tensor::from_f32(p + "env.rewards", {n}, e.rewards.data()));
    t.push_back(bytes_u8(p + "env.terminated", e.terminated));
    t.push_back(bytes_u8(p + "env.truncated", e.truncated));
    t.push_back(bytes_u8(p + "env.autoreset", e.autoreset));
    t.push_back(bits_i64(p + "gen", {4}, s.gen.data(), s.gen.size()));
    t.push_back(st_tensor::from_f64(p + "episode_return", {n}, s.episode_return.data()));
    t.push_back(bits_i64(p + "episode_length", {n}, s.episode_length.data(),
                         s.episode_length.size()));
    if (!s.discounted_return.empty())
      t.push_back(
        st_tensor::from_f64(p + "discounted_return", {n}, s.discounted_return.data()));
    const uint64_t counters[counter_count] = {s.status.batches, s.status.env_steps,
                                              s.status.episodes, s.status.non_finite,
                                              s.status.deltas_sent};
    t.push_back(bits_i64(p + "counters", {static_cast<int64_t>(counter_count)}, counters,
                         counter_count));
  }
  return learners::write_safetensors(path, file);
}

result<std::vector<actors::env_runner_state>>
load_runner_states(const std::string& path) {
  auto read = learners::read_safetensors(path);
  if (!read)
    return read.err();
  const st_file& file = *read;
  auto meta = [&](const std::string& key) -> const std::string* {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  auto not_ours = [&](const std::string& what) {
    return make_error(errc::bad_input, "{}: not a runner state file: {}", path, what);
  };
  const std::string* format = meta("format");
  if (!format)
    return not_ours(
      fmt::format("metadata has no 'format' (expected '{}')", runner_states_format));
  if (*format != runner_states_format)
    return not_ours(fmt::format("metadata format is '{}', expected '{}'", *format,
                                runner_states_format));
  const std::string* version = meta("version");
  const bool version_1 = version && *version == "1";
  const bool version_2 = version && *version == "2";
  if (!version ||
      (!version_1 && !version_2 && *version != std::to_string(runner_states_version)))
    return make_error(errc::unsupported_version,
                      "{}: runner state file format version '{}', this troupe reads "
                      "versions 1 to {}",
                      path, version ? *version : std::string("(missing)"),
                      runner_states_version);
  const std::string* runners_text = meta("runners");
  auto runners = runners_text ? parse_count(*runners_text) : std::nullopt;
  if (!runners || *runners > file.tensors.size())
    return make_error(errc::bad_input,
                      "{}: runner state file: metadata 'runners' must be a count of "
                      "runners (at most one per tensor), got '{}'",
                      path, runners_text ? *runners_text : std::string("(missing)"));

  std::vector<actors::env_runner_state> out;
  std::set<std::string> known;
  for (size_t k = 0; k < *runners; ++k) {
    const std::string p = prefix(k);
    env_runner_state s;
    auto bad = [&](const std::string& what) {
      return make_error(errc::bad_input, "{}: runner state file: runner {} ('{}'): {}",
                        path, k, s.runner, what);
    };
    for (const char* key : {"name", "env_id", "num_envs"})
      if (!meta(p + key))
        return bad(fmt::format("metadata '{}{}' is missing", p, key));
    s.runner = *meta(p + "name");
    s.env_id = *meta(p + "env_id");
    // Version 1 always saved the environments' state.
    bool with_state = true;
    if (!version_1) {
      const std::string* env_state = meta(p + "env_state");
      if (!env_state)
        return bad(fmt::format("metadata '{}env_state' is missing", p));
      if (*env_state != "saved" && *env_state != "none")
        return bad(fmt::format(
          "metadata '{}env_state' must be 'saved' or 'none', got '{}'", p, *env_state));
      with_state = *env_state == "saved";
    }
    auto spec = envs::find_spec(s.env_id);
    if (!spec)
      return bad(fmt::format("metadata '{}env_id': {}", p, spec.err().message));
    auto num_envs = parse_count(*meta(p + "num_envs"));
    // A tensor of num_envs elements each follows, so the file bounds it.
    if (!num_envs || *num_envs == 0 || *num_envs > (uint64_t{1} << 40))
      return bad(fmt::format("metadata '{}num_envs' must be a count >= 1, got '{}'", p,
                             *meta(p + "num_envs")));
    const auto n = static_cast<int64_t>(*num_envs);
    const auto dim = static_cast<int64_t>((*spec)->state_dim());

    // Finds tensor p + field and checks its dtype and shape.
    auto fetch = [&](const char* field, st_dtype dtype,
                     std::vector<int64_t> shape) -> result<const st_tensor*> {
      const std::string name = p + field;
      known.insert(name);
      const st_tensor* t = file.find(name);
      if (!t)
        return bad(fmt::format("tensor '{}' is missing", name));
      if (t->dtype != dtype || t->shape != shape)
        return bad(fmt::format("tensor '{}' must be {} {}, got {} {}", name,
                               learners::to_string(dtype), shape_string(shape),
                               learners::to_string(t->dtype), shape_string(t->shape)));
      return t;
    };
    auto flags = [&](const char* field, std::vector<uint8_t>& into) -> status {
      auto t = fetch(field, st_dtype::u8, {n});
      if (!t)
        return t.err();
      into.resize(static_cast<size_t>(n));
      std::memcpy(into.data(), (*t)->bytes.data(), into.size());
      for (size_t i = 0; i < into.size(); ++i)
        if (into[i] > 1)
          return bad(fmt::format("tensor '{}{}': environment {}: must be 0 or 1, got {}",
                                 p, field, i, into[i]));
      return {};
    };
    auto words = [&](const char* field,
                     std::vector<int64_t> shape) -> result<std::vector<uint64_t>> {
      auto t = fetch(field, st_dtype::i64, std::move(shape));
      if (!t)
        return t.err();
      auto values = (*t)->to_i64();
      std::vector<uint64_t> out(values.size());
      std::memcpy(out.data(), values.data(), values.size() * sizeof(int64_t));
      return out;
    };
    // I64 tensors of counts: each value must be >= 0.
    auto counts = [&](const char* field, std::vector<int64_t> shape,
                      int64_t max) -> result<std::vector<int64_t>> {
      auto t = fetch(field, st_dtype::i64, std::move(shape));
      if (!t)
        return t.err();
      auto values = (*t)->to_i64();
      for (size_t i = 0; i < values.size(); ++i)
        if (values[i] < 0 || values[i] > max)
          return bad(fmt::format("tensor '{}{}': element {}: must be in [0, {}], got {}",
                                 p, field, i, max, values[i]));
      return values;
    };

    auto& e = s.env;
    e.env_id = s.env_id;
    e.num_envs = *num_envs;
    e.with_state = with_state;
    if (with_state) {
      auto rng = words("env.rng", {n, 4});
      if (!rng)
        return rng.err();
      e.rng = std::move(*rng);
      auto state = fetch("env.state", st_dtype::f64, {n, dim});
      if (!state)
        return state.err();
      e.state = (*state)->to_f64();
      auto elapsed =
        counts("env.elapsed_steps", {n}, std::numeric_limits<int32_t>::max());
      if (!elapsed)
        return elapsed.err();
      e.elapsed_steps.assign(elapsed->begin(), elapsed->end());
    }
    auto rewards = fetch("env.rewards", st_dtype::f32, {n});
    if (!rewards)
      return rewards.err();
    e.rewards = (*rewards)->to_f32();
    for (auto [field, into] :
         {std::pair<const char*, std::vector<uint8_t>*>{"env.terminated", &e.terminated},
          {"env.truncated", &e.truncated},
          {"env.autoreset", &e.autoreset}})
      if (auto ok = flags(field, *into); !ok)
        return ok.err();
    auto gen = words("gen", {4});
    if (!gen)
      return gen.err();
    std::copy(gen->begin(), gen->end(), s.gen.begin());
    auto ret = fetch("episode_return", st_dtype::f64, {n});
    if (!ret)
      return ret.err();
    s.episode_return = (*ret)->to_f64();
    auto len = counts("episode_length", {n}, std::numeric_limits<int64_t>::max());
    if (!len)
      return len.err();
    s.episode_length.assign(len->begin(), len->end());
    // Version 3: reward normalization's discounted returns, when the runner kept them.
    if (!version_1 && !version_2 && file.find(p + "discounted_return")) {
      auto disc = fetch("discounted_return", st_dtype::f64, {n});
      if (!disc)
        return disc.err();
      s.discounted_return = (*disc)->to_f64();
    }
    auto counters = counts("counters", {static_cast<int64_t>(counter_count)},
                           std::numeric_limits<int64_t>::max());
    if (!counters)
      return counters.err();
    s.status.runner = s.runner;
    s.status.env_id = s.env_id;
    s.status.batches = static_cast<uint64_t>((*counters)[0]);
    s.status.env_steps = static_cast<uint64_t>((*counters)[1]);
    s.status.episodes = static_cast<uint64_t>((*counters)[2]);
    s.status.non_finite = static_cast<uint64_t>((*counters)[3]);
    s.status.deltas_sent = static_cast<uint64_t>((*counters)[4]);
    out.push_back(std::move(s));
  }
  for (auto& t : file.tensors)
    if (!known.count(t.name))
      return make_error(errc::bad_input,
                        "{}: runner state file: tensor '{}' is not part of the format "
                        "(metadata 'runners' = {})",
                        path, t.name, *runners);
  return out;
}

} // namespace troupe::edge
