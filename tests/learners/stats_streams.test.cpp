// The statistics state file read by stats_streams::load: a file with a valid
// checksum whose values no declare() or merge() could produce is refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "learners/stats_streams.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::learners;

namespace {

// The file format written independently of stats_streams::save (magic,
// version, payload size, payload, FNV-1a 64 of the payload).
struct stream_record {
  std::string name;
  uint32_t mode = 0;
  double momentum = 0.99;
  uint64_t version = 1;
  uint64_t count = 10;
  std::vector<double> mean, second;
  uint64_t rejected = 0;
};

template <class T>
void put(std::string& out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out.append(buf, sizeof(T));
}

std::string wrap(const std::string& payload) {
  std::string file = "TROUPEST";
  put<uint32_t>(file, 1);
  put<uint64_t>(file, payload.size());
  file += payload;
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : payload) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  put<uint64_t>(file, h);
  return file;
}

std::string state_file(const std::vector<stream_record>& streams) {
  std::string payload;
  put<uint32_t>(payload, static_cast<uint32_t>(streams.size()));
  for (auto& s : streams) {
    put<uint32_t>(payload, static_cast<uint32_t>(s.name.size()));
    payload += s.name;
    put<uint32_t>(payload, s.mode);
    put<double>(payload, s.momentum);
    put<uint64_t>(payload, s.mean.size());
    put<uint64_t>(payload, s.version);
    put<uint64_t>(payload, s.count);
    for (double x : s.mean)
      put<double>(payload, x);
    for (double x : s.second)
      put<double>(payload, x);
    put<uint64_t>(payload, s.rejected);
  }
  return wrap(payload);
}

} // namespace

TEST_CASE(
  "a state file whose values merges never produce is refused and changes nothing") {
  // Found while writing the stats_state fuzz target's invariants: load
  // checked the mean and m2 but not an ema stream's variance or any stream's
  // momentum, so a file with a NaN or negative ema variance or a momentum
  // outside [0, 1) was accepted and the keeper handed out NaN or negative
  // variances (or diverging ema updates).
  std::mt19937_64 gen(test::fresh_seed());
  std::uniform_real_distribution<double> real(0.1, 5.0);
  auto random_stream = [&](const std::string& name, uint32_t mode, size_t dim) {
    stream_record s;
    s.name = name;
    s.mode = mode;
    s.momentum = 0.9;
    for (size_t j = 0; j < dim; ++j) {
      s.mean.push_back(real(gen) - 2.5);
      s.second.push_back(real(gen));
    }
    return s;
  };
  test::temp_folder dir("stats-streams");
  const auto good = random_stream("obs", 0, 3);
  const auto good_ema = random_stream("ret", 1, 2);

  stats_streams streams;
  REQUIRE(streams.load(dir.write("good.bin", state_file({good, good_ema}))).ok());
  const auto before = streams.snapshot("obs").value();

  struct bad_case {
    std::string what;
    stream_record stream;
    std::string says;
  };
  std::vector<bad_case> cases;
  auto nan_var = good_ema;
  nan_var.second[1] = std::numeric_limits<double>::quiet_NaN();
  cases.push_back({"NaN ema variance", nan_var, "stream 'ret': variance[1] is nan"});
  auto neg_var = good_ema;
  neg_var.second[0] = -real(gen);
  cases.push_back({"negative ema variance", neg_var, "stream 'ret': variance[0] is -"});
  for (double m : {1.0, -0.25, 3.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto bad_momentum = good_ema;
    bad_momentum.momentum = m;
    cases.push_back({"momentum", bad_momentum,
                     fmt::format("stream 'ret': momentum {} is outside [0, 1)", m)});
  }
  for (auto& c : cases) {
    CAPTURE(c.what);
    auto path = dir.write("bad.bin", state_file({good, c.stream}));
    auto loaded = streams.load(path);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.err().code == errc::corrupt_file);
    CHECK_MESSAGE(loaded.err().message.find(c.says) != std::string::npos,
                  loaded.err().message);
    CHECK(loaded.err().message.find(path) == 0);
    // The state loaded before is untouched.
    auto after = streams.snapshot("obs").value();
    CHECK(after.mean == before.mean);
    CHECK(after.var == before.var);
  }
}

TEST_CASE("a state file whose ema stream claims more values than it holds is refused, "
          "not thrown") {
  // Found by the stats_state fuzz target (input in tests/fuzz/regressions/
  // stats_state/, a payload the target wraps in a header and checksum): load
  // sized the ema stream's m2 from the file's dimension before checking that
  // the payload held that many values, and threw std::length_error (or ran
  // out of memory), ending the keeper.
  test::temp_folder dir("stats-streams");
  const std::string path = std::string(TROUPE_SOURCE_DIR) +
                           "/tests/fuzz/regressions/stats_state/ema-dim-beyond-payload";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::string input((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  REQUIRE(input.size() > 1);
  REQUIRE(input[0] == '\0'); // the target's payload mode
  stats_streams streams;
  auto loaded = streams.load(dir.write("fuzz.bin", wrap(input.substr(1))));
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.err().code == errc::corrupt_file);
  CHECK(loaded.err().message.find("payload structure does not match its size") !=
        std::string::npos);

  // The same with fresh values: an ema stream whose dimension is beyond any
  // payload, after a valid stream.
  std::mt19937_64 gen(test::fresh_seed());
  for (uint64_t dim :
       {uint64_t{1} << 61, uint64_t{1} << 40, uint64_t{3} + gen() % 1000}) {
    CAPTURE(dim);
    std::string payload;
    put<uint32_t>(payload, 1);
    put<uint32_t>(payload, 3);
    payload += "ret";
    put<uint32_t>(payload, 1); // ema
    put<double>(payload, 0.9);
    put<uint64_t>(payload, dim);
    put<uint64_t>(payload, 1);
    put<uint64_t>(payload, 4);
    put<double>(payload, static_cast<double>(gen() % 100) / 7.0); // one value only
    put<uint64_t>(payload, 0);
    auto again = streams.load(dir.write("dim.bin", wrap(payload)));
    REQUIRE_FALSE(again.ok());
    CHECK(again.err().message.find("payload structure does not match its size") !=
          std::string::npos);
  }
}
