// Fuzzes the statistics keeper's state file (learners/stats_streams::load).
// The file carries a checksum, which random bytes almost never match, so the
// first byte picks the mode: odd, the rest is the whole file; even, the rest
// is the payload and the target wraps it in a valid header and checksum, so
// the fuzzer reaches the payload's structure. Invariants: no crash; a loaded
// state is one that declare() and merge() could have built (names, sizes,
// momentum in [0, 1), finite moments, variances >= 0), it survives save and
// load unchanged, and a sane delta merges into it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "learners/stats_streams.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;
using namespace troupe::learners;

namespace {

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

template <class T>
void put(std::string& out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out.append(buf, sizeof(T));
}

std::string wrap(const std::string& payload) {
  std::string file = "TROUPEST";
  put<uint32_t>(file, stats_streams::file_version);
  put<uint64_t>(file, payload.size());
  file += payload;
  put<uint64_t>(file, fnv1a64(payload));
  return file;
}

bool finite_and_non_negative(const std::vector<double>& xs) {
  for (double x : xs)
    if (!std::isfinite(x) || x < 0.0)
      return false;
  return true;
}

void check_snapshot(const stats_streams& streams, const std::string& name) {
  auto snap = streams.snapshot(name);
  TROUPE_FUZZ_EXPECT(snap.ok(), "stream '{}' has no snapshot", name);
  for (double m : snap->mean)
    TROUPE_FUZZ_EXPECT(std::isfinite(m), "stream '{}': snapshot mean {}", name, m);
  TROUPE_FUZZ_EXPECT(finite_and_non_negative(snap->var),
                     "stream '{}': a snapshot variance is negative or not finite", name);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::scratch_file file("stats_state");
  static fuzz::scratch_file copy("stats_state_copy");
  if (size == 0)
    return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string bytes = (data[0] & 1) ? rest : wrap(rest);
  const auto& path =
    file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());

  stats_streams streams;
  auto loaded = streams.load(path);
  if (!loaded.ok()) {
    TROUPE_FUZZ_EXPECT(!loaded.err().message.empty(), "a rejection without a message");
    TROUPE_FUZZ_EXPECT(streams.names().empty(), "a failed load changed the streams");
    return 0;
  }
  for (auto& name : streams.names()) {
    const stats_stream* s = streams.find(name);
    TROUPE_FUZZ_EXPECT(s && !s->name.empty() && s->name == name && s->dim() >= 1,
                       "stream '{}' without name or dimension", name);
    TROUPE_FUZZ_EXPECT(std::isfinite(s->momentum) && s->momentum >= 0.0 &&
                         s->momentum < 1.0,
                       "stream '{}': momentum {}", name, s->momentum);
    TROUPE_FUZZ_EXPECT(s->acc.well_formed() && s->acc.m2.size() == s->dim(),
                       "stream '{}': moments not well formed", name);
    if (s->mode == stats_mode::ema)
      TROUPE_FUZZ_EXPECT(s->ema_var.size() == s->dim() &&
                           finite_and_non_negative(s->ema_var),
                         "stream '{}': an ema variance is negative or not finite", name);
    else
      TROUPE_FUZZ_EXPECT(finite_and_non_negative(s->acc.m2),
                         "stream '{}': an m2 is negative or not finite", name);
    check_snapshot(streams, name);
  }

  // Saved and loaded again, the state is the same; a sane delta merges.
  auto saved = streams.save(copy.path());
  TROUPE_FUZZ_EXPECT(saved.ok(), "save failed: {}",
                     saved ? std::string{} : saved.err().message);
  stats_streams again;
  auto reloaded = again.load(copy.path());
  TROUPE_FUZZ_EXPECT(reloaded.ok(), "a saved state does not load: {}",
                     reloaded ? std::string{} : reloaded.err().message);
  TROUPE_FUZZ_EXPECT(again.names() == streams.names(), "the stream names changed");
  TROUPE_FUZZ_EXPECT(again.sequences() == streams.sequences() &&
                       again.fenced() == streams.fenced(),
                     "the sender table changed when saved and loaded");
  for (auto& name : streams.names()) {
    const stats_stream* a = streams.find(name);
    const stats_stream* b = again.find(name);
    TROUPE_FUZZ_EXPECT(
      a->mode == b->mode && a->version == b->version && a->acc.count == b->acc.count &&
        a->acc.mean == b->acc.mean && a->momentum == b->momentum &&
        a->rejected == b->rejected && a->duplicates == b->duplicates &&
        a->out_of_order == b->out_of_order && a->fenced == b->fenced &&
        (a->mode == stats_mode::ema ? a->ema_var == b->ema_var : a->acc.m2 == b->acc.m2),
      "stream '{}' changed when saved and loaded", name);
    moments_delta d;
    d.stream = name;
    d.worker = "fuzz";
    d.count = 1;
    d.mean.assign(a->dim(), 0.5);
    d.m2.assign(a->dim(), 0.0);
    auto merged = streams.merge(d);
    TROUPE_FUZZ_EXPECT(merged.ok(), "stream '{}': a sane delta is rejected: {}", name,
                       merged ? std::string{} : merged.err().message);
    // Finite values near the largest double may overflow when merged: a
    // numerical limit, not a parser's, so only the snapshot's shape counts.
    auto snap = streams.snapshot(name);
    TROUPE_FUZZ_EXPECT(snap.ok() && snap->mean.size() == a->dim() &&
                         snap->var.size() == a->dim(),
                       "stream '{}': no snapshot of its dimension after a merge", name);
  }
  return 0;
}
