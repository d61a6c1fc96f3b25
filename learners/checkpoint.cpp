#include "learners/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include <boost/crc.hpp>
#include <fmt/format.h>

namespace troupe::learners {

namespace {

// -- metadata values ---------------------------------------------------------

std::string format_number(double x) {
  // fmt's shortest form reads back to the same double (like Python's repr).
  return fmt::format("{}", x);
}

using metadata_map = std::map<std::string, std::string>;

result<std::string> get_key(const metadata_map& meta, const std::string& key,
                            const std::string& source, const char* expected) {
  auto it = meta.find(key);
  if (it == meta.end())
    return make_error(errc::corrupt_file, "{}: missing metadata key \"{}\" (expected {})",
                      source, key, expected);
  return it->second;
}

error bad_value(const std::string& source, const std::string& key, const char* expected,
                const std::string& value) {
  return make_error(errc::corrupt_file, "{}: metadata \"{}\" must be {}, got \"{}\"",
                    source, key, expected, value);
}

// The value of `key` as `parse` reads its text (`parse` returns an optional or
// a result, empty for text it rejects); a missing key or rejected text is an
// error naming the key, what was expected and the text.
template <class Parse>
auto get_parsed(const metadata_map& meta, const std::string& key,
                const std::string& source, const char* expected, Parse parse)
  -> result<std::decay_t<decltype(*parse(std::string()))>> {
  auto text = get_key(meta, key, source, expected);
  if (!text)
    return text.err();
  auto value = parse(*text);
  if (!value)
    return bad_value(source, key, expected, *text);
  return *value;
}

std::optional<int64_t> parse_decimal(const std::string& s) {
  if (s.empty() || s.size() > 18 ||
      s.find_first_not_of("-0123456789") != std::string::npos ||
      s.find('-', 1) != std::string::npos || s == "-")
    return std::nullopt;
  return static_cast<int64_t>(std::strtoll(s.c_str(), nullptr, 10));
}

std::optional<double> parse_number(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  double x = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(x) || errno == ERANGE ||
      std::isspace(static_cast<unsigned char>(s.front())))
    return std::nullopt;
  return x;
}

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true")
    return true;
  if (s == "false")
    return false;
  return std::nullopt;
}

result<int64_t> get_int(const metadata_map& meta, const std::string& key,
                        const std::string& source) {
  return get_parsed(meta, key, source, "a decimal integer", parse_decimal);
}

result<double> get_double(const metadata_map& meta, const std::string& key,
                          const std::string& source) {
  return get_parsed(meta, key, source, "a number", parse_number);
}

result<bool> get_bool(const metadata_map& meta, const std::string& key,
                      const std::string& source) {
  return get_parsed(meta, key, source, "\"true\" or \"false\"", parse_bool);
}

// Parses a JSON list of non-negative integers such as "[64, 64]" or "[]".
std::optional<std::vector<int64_t>> parse_int_list(const std::string& s) {
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
      ++i;
  };
  std::vector<int64_t> out;
  skip();
  if (i >= s.size() || s[i] != '[')
    return std::nullopt;
  ++i;
  skip();
  if (i < s.size() && s[i] == ']') {
    ++i;
  } else {
    for (;;) {
      skip();
      size_t start = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9')
        ++i;
      size_t len = i - start;
      if (len == 0 || len > 12 || (len > 1 && s[start] == '0'))
        return std::nullopt;
      out.push_back(std::strtoll(s.substr(start, len).c_str(), nullptr, 10));
      skip();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == ']') {
        ++i;
        break;
      }
      return std::nullopt;
    }
  }
  skip();
  if (i != s.size())
    return std::nullopt;
  return out;
}

// -- tensors -----------------------------------------------------------------

std::string describe(st_dtype type, const std::vector<int64_t>& shape) {
  return fmt::format("{} [{}]", to_string(type), fmt::join(shape, ", "));
}

// What the file must hold for one tensor, and where its values go.
struct expected_tensor {
  std::string name;
  st_dtype dtype;
  std::vector<int64_t> shape;
};

std::vector<int64_t> scalar_shape() {
  return {};
}

} // namespace

// -- spec <-> metadata -------------------------------------------------------

std::map<std::string, std::string> spec_metadata(const model_spec& spec) {
  metadata_map m;
  m["format"] = checkpoint_format;
  m["format_version"] = std::to_string(checkpoint_format_version);
  m["obs_dim"] = std::to_string(spec.obs_dim);
  m["action_space"] = to_string(spec.action);
  m["action_dim"] = std::to_string(spec.head_dim());
  m["hidden"] = fmt::format("[{}]", fmt::join(spec.hidden, ", "));
  m["activation"] = to_string(spec.activation);
  m["obs_norm"] = spec.obs_norm ? "true" : "false";
  m["obs_norm_eps"] = format_number(spec.obs_norm_eps);
  m["obs_norm_clip"] = format_number(spec.obs_norm_clip);
  m["batch_norm"] = to_string(spec.batch_norm);
  m["batch_norm_eps"] = format_number(spec.batch_norm_eps);
  m["batch_norm_momentum"] = format_number(spec.batch_norm_momentum);
  return m;
}

result<model_spec> spec_from_metadata(const std::map<std::string, std::string>& meta,
                                      const std::string& source) {
  auto format = get_key(meta, "format", source, "\"troupe.policy\"");
  if (!format)
    return format.err();
  if (*format != checkpoint_format)
    return make_error(errc::corrupt_file,
                      "{}: metadata \"format\" must be \"{}\", got \"{}\"", source,
                      checkpoint_format, *format);
  auto version = get_int(meta, "format_version", source);
  if (!version)
    return version.err();
  if (*version != checkpoint_format_version)
    return make_error(errc::unsupported_version,
                      "{}: checkpoint format_version {} is not supported (this troupe "
                      "reads version {})",
                      source, *version, checkpoint_format_version);

  model_spec spec;
  auto obs_dim = get_int(meta, "obs_dim", source);
  if (!obs_dim)
    return obs_dim.err();
  spec.obs_dim = *obs_dim;

  auto kind = get_parsed(meta, "action_space", source, "\"discrete\" or \"box\"",
                         parse_action_kind);
  if (!kind)
    return kind.err();
  spec.action = *kind;
  auto action_dim = get_int(meta, "action_dim", source);
  if (!action_dim)
    return action_dim.err();
  (spec.action == action_kind::discrete ? spec.n : spec.act_dim) = *action_dim;

  constexpr const char* list_expected =
    "a JSON list of layer widths such as \"[64, 64]\"";
  auto hidden = get_parsed(meta, "hidden", source, list_expected, parse_int_list);
  if (!hidden)
    return hidden.err();
  spec.hidden = *hidden;

  auto act =
    get_parsed(meta, "activation", source, "\"tanh\" or \"relu\"", parse_activation);
  if (!act)
    return act.err();
  spec.activation = *act;

  auto obs_norm = get_bool(meta, "obs_norm", source);
  if (!obs_norm)
    return obs_norm.err();
  spec.obs_norm = *obs_norm;
  auto obs_eps = get_double(meta, "obs_norm_eps", source);
  if (!obs_eps)
    return obs_eps.err();
  spec.obs_norm_eps = *obs_eps;
  auto obs_clip = get_double(meta, "obs_norm_clip", source);
  if (!obs_clip)
    return obs_clip.err();
  spec.obs_norm_clip = *obs_clip;

  auto bn = get_parsed(meta, "batch_norm", source, "\"none\", \"global\" or \"local\"",
                       parse_batch_norm);
  if (!bn)
    return bn.err();
  spec.batch_norm = *bn;
  auto bn_eps = get_double(meta, "batch_norm_eps", source);
  if (!bn_eps)
    return bn_eps.err();
  spec.batch_norm_eps = *bn_eps;
  auto bn_momentum = get_double(meta, "batch_norm_momentum", source);
  if (!bn_momentum)
    return bn_momentum.err();
  spec.batch_norm_momentum = *bn_momentum;

  if (auto valid = spec.validate(); !valid)
    return make_error(errc::corrupt_file,
                      "{}: the metadata describe an invalid policy: {}", source,
                      valid.err().message);
  return spec;
}

// -- saving ------------------------------------------------------------------

namespace {

status check_obs_stats(const stats_snapshot* stats, size_t dim) {
  if (!stats)
    return make_error(errc::invalid_argument,
                      "the policy normalizes observations (obs_norm = true) but no "
                      "observation statistics were given");
  if (stats->mean.size() != dim || stats->var.size() != dim)
    return make_error(errc::dimension_mismatch,
                      "observation statistics must have dimension {}, got mean {} and "
                      "var {}",
                      dim, stats->mean.size(), stats->var.size());
  for (size_t i = 0; i < dim; ++i) {
    if (!std::isfinite(stats->mean[i]))
      return make_error(errc::non_finite, "observation mean[{}] is {}", i,
                        stats->mean[i]);
    if (!std::isfinite(stats->var[i]) || stats->var[i] < 0.0)
      return make_error(errc::non_finite,
                        "observation var[{}] must be finite and >= 0, got {}", i,
                        stats->var[i]);
  }
  return ok_status();
}

} // namespace

result<st_file> make_checkpoint(const actor_critic& model,
                                const stats_snapshot* obs_stats,
                                const std::map<std::string, std::string>& extra) {
  const auto& spec = model.spec();
  st_file file;
  file.metadata = spec_metadata(spec);
  for (auto& [key, value] : extra) {
    if (file.metadata.count(key))
      return make_error(errc::invalid_argument,
                        "extra metadata may not redefine the reserved key \"{}\"", key);
    file.metadata.emplace(key, value);
  }
  for (auto& t : model.tensors())
    file.tensors.push_back(st_tensor::from_f32(t.name, t.shape, t.data));
  const int64_t tracked = model.num_batches_tracked();
  for (auto& layer : model.batch_norm_layers())
    file.tensors.push_back(st_tensor::from_i64(layer.prefix + ".num_batches_tracked",
                                               scalar_shape(), &tracked));
  if (spec.obs_norm) {
    auto dim = static_cast<size_t>(spec.obs_dim);
    if (auto ok = check_obs_stats(obs_stats, dim); !ok)
      return ok.err();
    const double count = static_cast<double>(obs_stats->count);
    file.tensors.push_back(
      st_tensor::from_f64("obs_rms.mean", {spec.obs_dim}, obs_stats->mean.data()));
    file.tensors.push_back(
      st_tensor::from_f64("obs_rms.var", {spec.obs_dim}, obs_stats->var.data()));
    file.tensors.push_back(st_tensor::from_f64("obs_rms.count", scalar_shape(), &count));
  }
  return file;
}

status save_checkpoint(const std::string& path, const actor_critic& model,
                       const stats_snapshot* obs_stats,
                       const std::map<std::string, std::string>& extra) {
  auto file = make_checkpoint(model, obs_stats, extra);
  if (!file)
    return make_error(file.err().code, "{}: {}", path, file.err().message);
  return write_safetensors(path, *file);
}

// -- loading -----------------------------------------------------------------

result<policy_checkpoint> checkpoint_from_file(const st_file& file,
                                               const std::string& source) {
  auto spec = spec_from_metadata(file.metadata, source);
  if (!spec)
    return spec.err();

  std::set<std::string> expected_names;
  // Finds `name` and checks its dtype and shape against the expectation.
  auto fetch = [&](const std::string& name, st_dtype dtype,
                   const std::vector<int64_t>& shape) -> result<const st_tensor*> {
    expected_names.insert(name);
    auto* t = file.find(name);
    if (!t)
      return make_error(errc::corrupt_file, "{}: missing tensor '{}' (expected {})",
                        source, name, describe(dtype, shape));
    if (t->dtype != dtype || t->shape != shape)
      return make_error(errc::corrupt_file, "{}: tensor '{}' is {}, expected {}", source,
                        name, describe(t->dtype, t->shape), describe(dtype, shape));
    return t;
  };
  auto non_finite = [&](const std::string& name, size_t index, double value) {
    return make_error(errc::non_finite,
                      "{}: tensor '{}' holds {} at index {} (expected "
                      "finite values)",
                      source, name, value, index);
  };

  // Check every model tensor against the layout before building the model,
  // so that metadata describing a huge network cannot make us allocate it.
  std::map<std::string, std::vector<float>> model_values;
  for (auto& slot : make_layout(*spec).tensors) {
    auto t = fetch(slot.name, st_dtype::f32, slot.shape);
    if (!t)
      return t.err();
    auto values = (*t)->to_f32();
    bool is_variance = slot.name.size() > 12 &&
                       slot.name.compare(slot.name.size() - 12, 12, ".running_var") == 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i]))
        return non_finite(slot.name, i, values[i]);
      if (is_variance && values[i] < 0.0f)
        return make_error(
          errc::corrupt_file,
          "{}: tensor '{}' holds {} at index {} (expected variances >= 0)", source,
          slot.name, values[i], i);
    }
    model_values.emplace(slot.name, std::move(values));
  }
  policy_checkpoint out{actor_critic(*spec, 0), stats_snapshot{}, file.metadata};
  auto& model = out.model;
  for (auto& ref : model.tensors()) {
    auto it = model_values.find(ref.name);
    TROUPE_CHECK(it != model_values.end() && it->second.size() == ref.size(),
                 "tensor '{}' of the model is not in its layout", ref.name);
    std::copy(it->second.begin(), it->second.end(), ref.data);
  }

  bool first_layer = true;
  for (auto& layer : model.batch_norm_layers()) {
    auto t = fetch(layer.prefix + ".num_batches_tracked", st_dtype::i64, scalar_shape());
    if (!t)
      return t.err();
    if (first_layer)
      model.set_num_batches_tracked((*t)->to_i64()[0]);
    first_layer = false;
  }

  if (spec->obs_norm) {
    std::vector<int64_t> shape{spec->obs_dim};
    auto mean = fetch("obs_rms.mean", st_dtype::f64, shape);
    if (!mean)
      return mean.err();
    auto var = fetch("obs_rms.var", st_dtype::f64, shape);
    if (!var)
      return var.err();
    auto count = fetch("obs_rms.count", st_dtype::f64, scalar_shape());
    if (!count)
      return count.err();
    auto& stats = out.obs_stats;
    stats.stream = "obs";
    stats.mean = (*mean)->to_f64();
    stats.var = (*var)->to_f64();
    for (size_t i = 0; i < stats.mean.size(); ++i) {
      if (!std::isfinite(stats.mean[i]))
        return non_finite("obs_rms.mean", i, stats.mean[i]);
      if (!std::isfinite(stats.var[i]) || stats.var[i] < 0.0)
        return make_error(
          errc::corrupt_file,
          "{}: tensor 'obs_rms.var' holds {} at index {} (expected finite "
          "variances >= 0)",
          source, stats.var[i], i);
    }
    double n = (*count)->to_f64()[0];
    if (!std::isfinite(n) || n < 0.0 || n > 1.8e19)
      return make_error(errc::corrupt_file,
                        "{}: tensor 'obs_rms.count' holds {} (expected a finite count "
                        ">= 0)",
                        source, n);
    // Gymnasium's RunningMeanStd starts its count at 1e-4; round to samples.
    stats.count = static_cast<uint64_t>(std::round(n));
  }

  for (auto& t : file.tensors)
    if (!expected_names.count(t.name))
      return make_error(errc::corrupt_file,
                        "{}: unexpected tensor '{}' (a {} policy with hidden [{}], "
                        "batch_norm \"{}\" and obs_norm {} has no such tensor)",
                        source, t.name, to_string(spec->action),
                        fmt::join(spec->hidden, ", "), to_string(spec->batch_norm),
                        spec->obs_norm ? "true" : "false");
  return out;
}

result<policy_checkpoint> load_checkpoint(const std::string& path) {
  auto file = read_safetensors(path);
  if (!file)
    return file.err();
  return checkpoint_from_file(*file, path);
}

// -- checkpoint folders of a run -------------------------------------------

namespace {

namespace fs = std::filesystem;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](unsigned char c) { return std::isdigit(c) != 0; });
}

// Compares two digit strings as numbers of any width.
bool numerically_before(const std::string& a, const std::string& b) {
  auto strip = [](const std::string& s) {
    auto first = s.find_first_not_of('0');
    return first == std::string::npos ? std::string{} : s.substr(first);
  };
  auto x = strip(a), y = strip(b);
  return x.size() != y.size() ? x.size() < y.size() : x < y;
}

struct file_sum {
  uint64_t size = 0;
  uint32_t crc = 0;
};

// Size and CRC-32 of a file; errors name it with the system's reason.
result<file_sum> sum_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::corrupt_file, "{}: cannot open: {}", path,
                      std::strerror(errno));
  boost::crc_32_type crc;
  file_sum out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const auto got = static_cast<size_t>(in.gcount());
    crc.process_bytes(buf, got);
    out.size += got;
  }
  if (in.bad())
    return make_error(errc::io_error, "{}: read failed: {}", path, std::strerror(errno));
  out.crc = crc.checksum();
  return out;
}

} // namespace

std::vector<std::string> checkpoint_folders(const std::string& run_dir) {
  std::vector<std::pair<std::string, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(run_dir) / "checkpoints", ec), end;
       !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    std::error_code dir_ec;
    if (all_digits(name) && it->is_directory(dir_ec))
      found.emplace_back(name, it->path().string());
  }
  std::sort(found.begin(), found.end(),
            [](auto& a, auto& b) { return numerically_before(a.first, b.first); });
  std::vector<std::string> out;
  for (auto& f : found)
    out.push_back(f.second);
  return out;
}

status write_checkpoint_manifest(const std::string& folder,
                                 const std::vector<std::string>& files) {
  std::string text = "# troupe checkpoint manifest: file, size in bytes, CRC-32\n";
  for (auto& name : files) {
    auto sum = sum_file((fs::path(folder) / name).string());
    if (!sum)
      return sum.err();
    text += fmt::format("{} {} {:08x}\n", name, sum->size, sum->crc);
  }
  return write_file_atomically((fs::path(folder) / checkpoint_manifest_name).string(),
                               text.data(), text.size());
}

status verify_checkpoint_manifest(const std::string& folder) {
  const auto manifest = (fs::path(folder) / checkpoint_manifest_name).string();
  std::error_code ec;
  if (!fs::exists(manifest, ec))
    return ok_status();
  std::ifstream in(manifest);
  if (!in)
    return make_error(errc::corrupt_file, "{}: cannot open: {}", manifest,
                      std::strerror(errno));
  std::string line;
  size_t listed = 0;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream fields(line);
    std::string name, crc_text;
    uint64_t size = 0;
    if (!(fields >> name >> size >> crc_text) || crc_text.size() != 8 ||
        crc_text.find_first_not_of("0123456789abcdef") != std::string::npos ||
        name.find('/') != std::string::npos)
      return make_error(errc::corrupt_file,
                        "{}:{}: expected \"FILE SIZE CRC32\" (8 hex digits), got \"{}\"",
                        manifest, number, line);
    const auto path = (fs::path(folder) / name).string();
    if (!fs::exists(path, ec))
      return make_error(errc::corrupt_file, "{}: missing (listed in {})", path, manifest);
    auto sum = sum_file(path);
    if (!sum)
      return sum.err();
    if (sum->size != size)
      return make_error(errc::corrupt_file,
                        "{}: {} bytes, but {} lists {} (cut short or "
                        "overwritten)",
                        path, sum->size, manifest, size);
    const auto crc = static_cast<uint32_t>(std::strtoul(crc_text.c_str(), nullptr, 16));
    if (sum->crc != crc)
      return make_error(errc::corrupt_file,
                        "{}: CRC-32 {:08x}, but {} lists {:08x} (the contents changed "
                        "after it was written)",
                        path, sum->crc, manifest, crc);
    ++listed;
  }
  if (listed == 0)
    return make_error(errc::corrupt_file, "{}: lists no file", manifest);
  return ok_status();
}

result<std::string>
newest_good_checkpoint(const std::string& run_dir,
                       const std::function<status(const std::string&)>& check,
                       const std::function<void(const std::string&)>& report) {
  auto all = checkpoint_folders(run_dir);
  if (all.empty())
    return make_error(errc::not_found, "{}: no complete checkpoint (no {}/<NNNNNNNNNN>/)",
                      run_dir, (fs::path(run_dir) / "checkpoints").string());
  std::vector<std::string> rejected;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto ok = verify_checkpoint_manifest(*it);
    if (ok && check)
      ok = check(*it);
    if (ok)
      return *it;
    rejected.push_back(ok.err().message);
    if (report)
      report(std::next(it) != all.rend()
               ? fmt::format("{}: not usable: {}; falling back to {}", *it,
                             ok.err().message, *std::next(it))
               : fmt::format("{}: not usable: {}", *it, ok.err().message));
  }
  std::string list;
  for (auto& r : rejected)
    list += "\n  " + r;
  return make_error(errc::corrupt_file, "{}: none of its {} checkpoint(s) is usable:{}",
                    run_dir, all.size(), list);
}

result<std::string>
resolve_policy_file(const std::string& given,
                    const std::function<void(const std::string&)>& report) {
  namespace fs = std::filesystem;
  constexpr const char* policy_file_name = "policy.safetensors";
  std::error_code ec;
  fs::path p(given);
  if (fs::is_regular_file(p, ec))
    return given;
  if (!fs::is_directory(p, ec))
    return make_error(errc::not_found, "{}: no such file or folder", given);
  if (fs::is_regular_file(p / policy_file_name, ec))
    return (p / policy_file_name).string();
  if (!fs::is_directory(p / "checkpoints", ec))
    return make_error(
      errc::not_found,
      "{}: a folder without {} or checkpoints/ (expected a policy file, a "
      "checkpoint folder or a run folder)",
      given, policy_file_name);
  auto found = newest_good_checkpoint(
    p.string(),
    [&](const std::string& folder) -> status {
      auto policy = load_checkpoint((fs::path(folder) / policy_file_name).string());
      if (!policy)
        return policy.err();
      return ok_status();
    },
    [&](const std::string& why) {
      if (report)
        report(why);
    });
  if (!found)
    return found.err();
  return (fs::path(*found) / policy_file_name).string();
}

} // namespace troupe::learners
