#include "learners/stats_streams.hpp"

#include "learners/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace troupe::learners {

result<stats_mode> parse_stats_mode(const std::string& text) {
  if (text == "cumulative")
    return stats_mode::cumulative;
  if (text == "ema")
    return stats_mode::ema;
  return make_error(errc::invalid_argument,
                    "unknown statistics mode '{}' (valid: cumulative, ema)", text);
}

const char* to_string(stats_mode mode) noexcept {
  return mode == stats_mode::ema ? "ema" : "cumulative";
}

// -- declaring and merging ---------------------------------------------------

status stats_streams::declare(const stream_decl& decl) {
  auto mode = parse_stats_mode(decl.mode);
  if (!mode)
    return make_error(errc::invalid_argument, "stream '{}': {}", decl.name,
                      mode.err().message);
  if (decl.name.empty())
    return make_error(errc::invalid_argument, "a stream needs a name");
  if (decl.dim == 0)
    return make_error(errc::invalid_argument,
                      "stream '{}': dimension must be at least 1, got 0", decl.name);
  if (!(decl.momentum >= 0.0 && decl.momentum < 1.0))
    return make_error(errc::invalid_argument,
                      "stream '{}': momentum must be in [0, 1), got {}", decl.name,
                      decl.momentum);
  if (auto i = streams_.find(decl.name); i != streams_.end()) {
    if (i->second.dim() != decl.dim || i->second.mode != *mode)
      return make_error(errc::dimension_mismatch,
                        "stream '{}' exists with dim {} and mode {}; cannot "
                        "declare it again with dim {} and mode {}",
                        decl.name, i->second.dim(), to_string(i->second.mode), decl.dim,
                        decl.mode);
    return {};
  }
  stats_stream s;
  s.name = decl.name;
  s.mode = *mode;
  s.momentum = decl.momentum;
  s.acc = kernels::moments(decl.dim);
  if (s.mode == stats_mode::ema)
    s.ema_var.assign(decl.dim, 0.0);
  streams_.emplace(decl.name, std::move(s));
  return {};
}

namespace {

// The first non-finite entry of xs, or -1.
std::ptrdiff_t first_non_finite(const std::vector<double>& xs) {
  for (size_t j = 0; j < xs.size(); ++j)
    if (!std::isfinite(xs[j]))
      return static_cast<std::ptrdiff_t>(j);
  return -1;
}

} // namespace

status stats_streams::merge(const moments_delta& d, delta_outcome* outcome) {
  if (outcome)
    *outcome = delta_outcome::merged;
  auto i = streams_.find(d.stream);
  if (i == streams_.end()) {
    ++rejected_unknown_;
    return make_error(errc::not_found,
                      "delta from worker '{}' rejected: unknown stream '{}'", d.worker,
                      d.stream);
  }
  auto& s = i->second;
  auto reject = [&](errc code, std::string why) -> status {
    ++s.rejected;
    ++s.rejected_by_worker[d.worker];
    return error{code, fmt::format("delta from worker '{}' to stream '{}' "
                                   "rejected: {}",
                                   d.worker, d.stream, why)};
  };
  if (d.mean.size() != s.dim() || d.m2.size() != s.dim())
    return reject(errc::dimension_mismatch,
                  fmt::format("expected dimension {}, got mean of {} and m2 of {}",
                              s.dim(), d.mean.size(), d.m2.size()));
  if (d.count == 0)
    return reject(errc::invalid_argument, "count must be at least 1, got 0");
  // One branch-free pass decides; the slow scans below only name the culprit.
  bool bad = false;
  for (size_t j = 0; j < d.mean.size(); ++j)
    bad |= !std::isfinite(d.mean[j]) | !std::isfinite(d.m2[j]) | (d.m2[j] < 0.0);
  if (bad) {
    if (auto j = first_non_finite(d.mean); j >= 0)
      return reject(errc::non_finite, fmt::format("mean[{}] is {}", j, d.mean[j]));
    if (auto j = first_non_finite(d.m2); j >= 0)
      return reject(errc::non_finite, fmt::format("m2[{}] is {}", j, d.m2[j]));
    for (size_t j = 0; j < d.m2.size(); ++j)
      if (d.m2[j] < 0.0)
        return reject(errc::invalid_argument,
                      fmt::format("m2[{}] must be >= 0, got {}", j, d.m2[j]));
  }
  if (d.incarnation != 0) {
    if (d.seq_first == 0 || d.seq_last < d.seq_first)
      return reject(errc::invalid_argument,
                    fmt::format("sequence range [{}, {}] of incarnation {:#x} is not a "
                                "range of numbers from 1",
                                d.seq_first, d.seq_last, d.incarnation));
    auto drop = [&](delta_outcome why) -> status {
      if (outcome)
        *outcome = why;
      return {};
    };
    switch (ledger_.admit({d.worker, d.incarnation}, d.stream, d.seq_first, d.seq_last,
                          base::sequence_gaps::refused)) {
    case base::delivery_verdict::fenced:
      ++s.fenced;
      ++s.fenced_by_worker[d.worker];
      return drop(delta_outcome::fenced);
    case base::delivery_verdict::duplicate:
      ++s.duplicates;
      ++s.duplicates_by_worker[d.worker];
      return drop(delta_outcome::duplicate);
    case base::delivery_verdict::gap:
      ++s.out_of_order;
      return drop(delta_outcome::out_of_order);
    case base::delivery_verdict::accepted:
      break;
    }
    merged_samples_[{d.worker, d.incarnation}] += d.count;
  }
  if (s.mode == stats_mode::cumulative) {
    kernels::merge(s.acc.count, s.acc.mean.data(), s.acc.m2.data(), d.count,
                   d.mean.data(), d.m2.data(), s.dim());
  } else {
    const double inv = 1.0 / static_cast<double>(d.count);
    if (s.version == 0) {
      // The first batch initializes the running values (no bias toward 0/1).
      for (size_t j = 0; j < s.dim(); ++j) {
        s.acc.mean[j] = d.mean[j];
        s.ema_var[j] = d.m2[j] * inv;
      }
    } else {
      const double m = s.momentum, w = 1.0 - s.momentum;
      for (size_t j = 0; j < s.dim(); ++j) {
        s.acc.mean[j] = m * s.acc.mean[j] + w * d.mean[j];
        s.ema_var[j] = m * s.ema_var[j] + w * (d.m2[j] * inv);
      }
    }
    s.acc.count += d.count;
  }
  ++s.version;
  return {};
}

// -- reading -----------------------------------------------------------------

void stats_streams::snapshot_into(const stats_stream& s, stats_snapshot& out) {
  out.stream = s.name;
  out.version = s.version;
  out.count = s.acc.count;
  out.mean.assign(s.acc.mean.begin(), s.acc.mean.end());
  if (s.acc.count == 0) {
    // Nothing merged yet: variance 1, as in a fresh view, so that normalizing
    // with it is the identity (variance 0 would scale by 1/sqrt(eps)).
    out.var.assign(s.dim(), 1.0);
  } else if (s.mode == stats_mode::ema) {
    out.var.assign(s.ema_var.begin(), s.ema_var.end());
  } else {
    out.var.resize(s.dim());
    const double inv = s.acc.count > 0 ? 1.0 / static_cast<double>(s.acc.count) : 0.0;
    for (size_t j = 0; j < s.dim(); ++j)
      out.var[j] = s.acc.m2[j] * inv;
  }
}

result<stats_snapshot> stats_streams::snapshot(const std::string& name) const {
  auto s = find(name);
  if (!s)
    return make_error(errc::not_found, "unknown stream '{}'", name);
  stats_snapshot out;
  snapshot_into(*s, out);
  return out;
}

result<stream_status> stats_streams::status_of(const std::string& name) const {
  auto s = find(name);
  if (!s)
    return make_error(errc::not_found, "unknown stream '{}'", name);
  stream_status out;
  out.name = s->name;
  out.dim = s->dim();
  out.version = s->version;
  out.count = s->acc.count;
  out.rejected = s->rejected;
  out.rejected_by_worker = s->rejected_by_worker;
  out.duplicates = s->duplicates;
  out.duplicates_by_worker = s->duplicates_by_worker;
  out.out_of_order = s->out_of_order;
  out.fenced = s->fenced;
  out.fenced_by_worker = s->fenced_by_worker;
  return out;
}

delta_acks stats_streams::acks_of(const sender_id& sender) const {
  delta_acks out;
  out.worker = sender.first;
  out.incarnation = sender.second;
  out.fenced = is_fenced(sender);
  out.last = ledger_.channels_of(sender);
  return out;
}

const stats_stream* stats_streams::find(const std::string& name) const {
  auto i = streams_.find(name);
  return i == streams_.end() ? nullptr : &i->second;
}

std::vector<std::string> stats_streams::names() const {
  std::vector<std::string> out;
  for (auto& kv : streams_)
    out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

// -- the state file ----------------------------------------------------------

namespace {

constexpr char file_magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'S', 'T'};

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Little-endian writer/reader of fixed-size values (x86 and ARM are LE; the
// format is defined as little-endian).
struct writer {
  std::string out;
  template <class T>
  void put(T x) {
    char buf[sizeof(T)];
    std::memcpy(buf, &x, sizeof(T));
    out.append(buf, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void put_doubles(const std::vector<double>& xs) {
    for (double x : xs)
      put(x);
  }
};

struct reader {
  const std::string& in;
  size_t pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T x{};
    if (pos + sizeof(T) > in.size()) {
      ok = false;
      return x;
    }
    std::memcpy(&x, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return x;
  }
  std::string get_string(size_t max_len) {
    auto n = get<uint32_t>();
    if (!ok || n > max_len || pos + n > in.size()) {
      ok = false;
      return {};
    }
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<double> get_doubles(uint64_t n) {
    if (!ok || n > (in.size() - pos) / sizeof(double)) {
      ok = false;
      return {};
    }
    std::vector<double> xs(n);
    for (auto& x : xs)
      x = get<double>();
    return xs;
  }
};

} // namespace

status stats_streams::save(const std::string& path) const {
  writer payload;
  auto sorted = names();
  payload.put<uint32_t>(static_cast<uint32_t>(sorted.size()));
  for (auto& name : sorted) {
    auto& s = streams_.at(name);
    payload.put_string(s.name);
    payload.put<uint32_t>(static_cast<uint32_t>(s.mode));
    payload.put<double>(s.momentum);
    payload.put<uint64_t>(s.dim());
    payload.put<uint64_t>(s.version);
    payload.put<uint64_t>(s.acc.count);
    payload.put_doubles(s.acc.mean);
    payload.put_doubles(s.mode == stats_mode::ema ? s.ema_var : s.acc.m2);
    payload.put<uint64_t>(s.rejected);
    payload.put<uint64_t>(s.duplicates);
    payload.put<uint64_t>(s.out_of_order);
    payload.put<uint64_t>(s.fenced);
  }
  // Version 2: the sender table, so that a resumed keeper still drops a
  // reconnecting sender's resends of what it merged before the save.
  payload.put<uint64_t>(sequences().size());
  for (auto& [key, last] : sequences()) {
    payload.put_string(std::get<0>(key));
    payload.put<uint64_t>(std::get<1>(key));
    payload.put_string(std::get<2>(key));
    payload.put<uint64_t>(last);
  }
  payload.put<uint64_t>(fenced().size());
  for (auto& [worker, incarnation] : fenced()) {
    payload.put_string(worker);
    payload.put<uint64_t>(incarnation);
  }
  writer file;
  file.out.append(file_magic, sizeof(file_magic));
  file.put<uint32_t>(file_version);
  file.put<uint64_t>(payload.out.size());
  file.out += payload.out;
  file.put<uint64_t>(fnv1a64(payload.out));

  return write_file_atomically(path, file.out.data(), file.out.size());
}

status stats_streams::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::io_error, "{}: cannot open statistics file", path);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  auto corrupt = [&](const std::string& what) {
    return make_error(errc::corrupt_file, "{}: not a valid statistics file: {}", path,
                      what);
  };
  const size_t head = sizeof(file_magic) + sizeof(uint32_t) + sizeof(uint64_t);
  if (bytes.size() < head ||
      std::memcmp(bytes.data(), file_magic, sizeof(file_magic)) != 0)
    return corrupt("wrong magic (expected a troupe statistics file)");
  reader r{bytes, sizeof(file_magic)};
  auto version = r.get<uint32_t>();
  if (version != 1 && version != file_version)
    return make_error(errc::unsupported_version,
                      "{}: statistics file format version {}, this troupe reads "
                      "versions 1 to {}",
                      path, version, file_version);
  auto payload_size = r.get<uint64_t>();
  if (payload_size > bytes.size() - head ||
      bytes.size() - head - payload_size != sizeof(uint64_t))
    return corrupt("truncated or trailing bytes");
  std::string payload = bytes.substr(head, payload_size);
  reader tail{bytes, head + payload_size};
  if (tail.get<uint64_t>() != fnv1a64(payload))
    return corrupt("checksum mismatch");

  reader p{payload};
  std::unordered_map<std::string, stats_stream> loaded;
  auto n = p.get<uint32_t>();
  for (uint32_t k = 0; k < n && p.ok; ++k) {
    stats_stream s;
    s.name = p.get_string(4096);
    auto mode = p.get<uint32_t>();
    if (mode > 1)
      return corrupt("unknown stream mode");
    s.mode = static_cast<stats_mode>(mode);
    s.momentum = p.get<double>();
    auto dim = p.get<uint64_t>();
    s.version = p.get<uint64_t>();
    s.acc.count = p.get<uint64_t>();
    s.acc.mean = p.get_doubles(dim);
    auto second = p.get_doubles(dim);
    if (!p.ok) // dim is only trusted once the payload held that many values
      break;
    if (s.mode == stats_mode::ema) {
      s.ema_var = std::move(second);
      s.acc.m2.assign(dim, 0.0);
    } else {
      s.acc.m2 = std::move(second);
    }
    s.rejected = p.get<uint64_t>();
    if (version >= 2) {
      s.duplicates = p.get<uint64_t>();
      s.out_of_order = p.get<uint64_t>();
      s.fenced = p.get<uint64_t>();
    }
    if (!p.ok)
      break;
    if (s.name.empty() || dim == 0 || !s.acc.well_formed())
      return corrupt("a stream has no name, no dimension or non-finite values");
    // What declare() and merge() guarantee, so that a loaded state never
    // hands out a negative or non-finite variance.
    if (!(s.momentum >= 0.0 && s.momentum < 1.0))
      return corrupt(
        fmt::format("stream '{}': momentum {} is outside [0, 1)", s.name, s.momentum));
    for (size_t j = 0; j < s.ema_var.size(); ++j) // well_formed() checked m2
      if (!std::isfinite(s.ema_var[j]) || s.ema_var[j] < 0.0)
        return corrupt(
          fmt::format("stream '{}': variance[{}] is {} (must be finite and >= 0)", s.name,
                      j, s.ema_var[j]));
    if (!loaded.emplace(s.name, std::move(s)).second)
      return corrupt("a stream name appears twice");
  }
  std::map<std::tuple<std::string, uint64_t, std::string>, uint64_t> table;
  std::set<sender_id> fenced;
  if (version >= 2 && p.ok) {
    // Each entry takes at least 28 bytes: a count beyond that is corrupt.
    auto entries = p.get<uint64_t>();
    if (entries > payload.size() / 28)
      return corrupt(fmt::format("sender table of {} entries in a payload of {} bytes",
                                 entries, payload.size()));
    for (uint64_t k = 0; k < entries && p.ok; ++k) {
      auto worker = p.get_string(4096);
      auto incarnation = p.get<uint64_t>();
      auto stream = p.get_string(4096);
      auto last = p.get<uint64_t>();
      if (!p.ok)
        break;
      if (incarnation == 0 || last == 0 || !loaded.count(stream))
        return corrupt(fmt::format("sender table entry ('{}', {:#x}, '{}', {}): zero "
                                   "incarnation or sequence, or unknown stream",
                                   worker, incarnation, stream, last));
      if (!table.emplace(std::make_tuple(worker, incarnation, stream), last).second)
        return corrupt("a sender table entry appears twice");
    }
    auto n_fenced = p.get<uint64_t>();
    if (n_fenced > payload.size() / 12)
      return corrupt(fmt::format("{} fenced senders in a payload of {} bytes", n_fenced,
                                 payload.size()));
    for (uint64_t k = 0; k < n_fenced && p.ok; ++k) {
      auto worker = p.get_string(4096);
      auto incarnation = p.get<uint64_t>();
      if (!p.ok)
        break;
      if (incarnation == 0 || !fenced.emplace(worker, incarnation).second)
        return corrupt("a fenced sender with incarnation 0 or listed twice");
    }
  }
  if (!p.ok || p.pos != payload.size())
    return corrupt("payload structure does not match its size");
  streams_ = std::move(loaded);
  ledger_.restore(std::move(table), std::move(fenced));
  merged_samples_.clear();
  return {};
}

} // namespace troupe::learners
