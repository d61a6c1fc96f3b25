// TensorBoard event files (learners/tensorboard.hpp), read back with the
// independent reader of tests/tensorboard_reader.hpp: its own CRC-32C, both
// masked CRCs of every record checked, the Event fields decoded.
#include <doctest/doctest.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "learners/tensorboard.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/temp_folder.hpp"
#include "tests/tensorboard_reader.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::read_tb_events;
using troupe::test::read_tb_events_file;
using troupe::test::reference_crc32c;
using troupe::test::temp_folder;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// Random scalars: tags of random length and characters (a '/' group at
// times), values spread over many magnitudes and both signs.
std::vector<tb_scalar> random_scalars(std::mt19937_64& rng, std::vector<double>& exact) {
  std::uniform_int_distribution<int> count(1, 30), length(1, 40), letter('a', 'z');
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0), exponent(-30.0, 30.0);
  std::vector<tb_scalar> out(static_cast<size_t>(count(rng)));
  exact.clear();
  for (auto& s : out) {
    const int n = length(rng);
    for (int i = 0; i < n; ++i)
      s.tag.push_back(
        i > 0 && i + 1 < n && letter(rng) == 'q' ? '/' : static_cast<char>(letter(rng)));
    const double x = mantissa(rng) * std::pow(10.0, exponent(rng));
    exact.push_back(x);
    s.value = static_cast<float>(x);
  }
  return out;
}

} // namespace

TEST_CASE("the test reader's CRC-32C gives the standard check value and troupe's agrees "
          "with it on random bytes") {
  const char check[] = "123456789";
  CHECK(reference_crc32c(check, 9) == 0xE3069283u);
  CHECK(crc32c(check, 9) == 0xE3069283u);
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> length(0, 3000);
  for (int round = 0; round < 50; ++round) {
    std::string bytes(length(rng), '\0');
    for (auto& c : bytes)
      c = static_cast<char>(byte(rng));
    CAPTURE(bytes.size());
    const uint32_t whole = reference_crc32c(bytes.data(), bytes.size());
    CHECK(crc32c(bytes.data(), bytes.size()) == whole);
    // Continuing from a prefix's CRC gives the whole's.
    const size_t cut = bytes.size() / 3;
    CHECK(crc32c(bytes.data() + cut, bytes.size() - cut, crc32c(bytes.data(), cut)) ==
          whole);
    CHECK(tfrecord_masked_crc(bytes.data(), bytes.size()) ==
          troupe::test::reference_masked_crc(bytes.data(), bytes.size()));
  }
}

TEST_CASE("an events file written from random scalars reads back with every tag, value "
          "and step, both CRCs of every record checked") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("tensorboard-roundtrip");
  std::uniform_real_distribution<double> seconds(1.0e9, 2.0e9);
  const double opened = seconds(rng);
  auto file = tb_event_file::create(dir.path.string(), opened);
  REQUIRE_MESSAGE(file.ok(), file.err().message);
  const auto name = fs::path(file->path()).filename().string();
  CHECK(name.rfind(fmt::format("events.out.tfevents.{}.", static_cast<int64_t>(opened)),
                   0) == 0);
  CHECK(fs::path(file->path()).parent_path() == dir.path);

  struct written {
    double wall_time;
    int64_t step;
    std::vector<tb_scalar> scalars;
    std::vector<double> exact;
  };
  std::vector<written> events;
  std::uniform_int_distribution<int64_t> stride(1, int64_t{1} << 40);
  int64_t step = std::uniform_int_distribution<int64_t>(0, 1000)(rng);
  const int n = std::uniform_int_distribution<int>(5, 40)(rng);
  for (int i = 0; i < n; ++i) {
    written w;
    w.wall_time = opened + i * 0.25 + seconds(rng) * 1e-12;
    w.step = step;
    w.scalars = random_scalars(rng, w.exact);
    REQUIRE(file->write_scalars(w.wall_time, w.step, w.scalars).ok());
    events.push_back(std::move(w));
    step += stride(rng);
  }

  auto read = read_tb_events_file(file->path());
  REQUIRE_MESSAGE(read.error.empty(), read.error);
  REQUIRE(read.events.size() == events.size() + 1);
  // As TensorFlow writes: first an Event with the file version and no step.
  const auto& first = read.events.front();
  CHECK(first.file_version == "brain.Event:2");
  CHECK(first.wall_time == opened);
  CHECK(!first.has_step);
  CHECK(!first.has_summary);
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& got = read.events[i + 1];
    const auto& want = events[i];
    CAPTURE(i);
    CHECK(got.file_version.empty());
    CHECK(got.wall_time == want.wall_time);
    CHECK(got.has_step);
    CHECK(got.step == want.step);
    REQUIRE(got.values.size() == want.scalars.size());
    for (size_t k = 0; k < got.values.size(); ++k) {
      CHECK(got.values[k].first == want.scalars[k].tag);
      // The float32 nearest the float64 input: within half a float32 step.
      CHECK(got.values[k].second == static_cast<float>(want.exact[k]));
      CHECK(std::abs(got.values[k].second - want.exact[k]) <=
            std::abs(want.exact[k]) * std::ldexp(1.0, -24));
    }
  }
}

TEST_CASE("changing any one byte of an events file fails the reader's CRC check") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("tensorboard-corrupt");
  auto file = tb_event_file::create(dir.path.string(), 1.7e9);
  REQUIRE(file.ok());
  std::vector<double> exact;
  for (int64_t step = 1; step <= 3; ++step)
    REQUIRE(
      file->write_scalars(1.7e9 + step, step * 1000, random_scalars(rng, exact)).ok());
  const std::string whole = read_bytes(file->path());
  REQUIRE(read_tb_events(whole).error.empty());
  std::uniform_int_distribution<int> flip(1, 255);
  for (size_t at = 0; at < whole.size(); ++at) {
    std::string bad = whole;
    bad[at] = static_cast<char>(bad[at] ^ flip(rng));
    const auto read = read_tb_events(bad);
    CAPTURE(at);
    REQUIRE(!read.error.empty());
    // A changed length is caught by the length's CRC, never read as a length.
    CHECK(read.error.find("CRC does not match") != std::string::npos);
  }
}

TEST_CASE(
  "a second events file made in the same second gets a name of its own and leaves "
  "the first whole") {
  temp_folder dir("tensorboard-second");
  auto a = tb_event_file::create(dir.path.string(), 1.7e9 + 0.1);
  REQUIRE(a.ok());
  REQUIRE(a->write_scalars(1.7e9 + 0.2, 5, {{"x", 1.5f}}).ok());
  const std::string before = read_bytes(a->path());
  auto b = tb_event_file::create(dir.path.string(), 1.7e9 + 0.7);
  REQUIRE(b.ok());
  CHECK(b->path() == a->path() + ".1");
  REQUIRE(b->write_scalars(1.7e9 + 0.8, 6, {{"x", 2.5f}}).ok());
  CHECK(read_bytes(a->path()) == before);
  const auto read = read_tb_events_file(b->path());
  REQUIRE_MESSAGE(read.error.empty(), read.error);
  REQUIRE(read.events.size() == 2);
  CHECK(read.events[1].step == 6);
  CHECK(troupe::test::tb_event_files(dir.path).size() == 2);
}

TEST_CASE("an events file that cannot be created is an error naming the path and the "
          "system's reason") {
  temp_folder dir("tensorboard-unwritable");
  SUBCASE("the folder does not exist") {
    auto file = tb_event_file::create((dir.path / "missing").string(), 1.7e9);
    REQUIRE(!file.ok());
    CHECK(file.err().code == troupe::errc::io_error);
    CHECK(file.err().message.find((dir.path / "missing").string()) != std::string::npos);
    CHECK(file.err().message.find(std::strerror(ENOENT)) != std::string::npos);
  }
  SUBCASE("the folder is a file") {
    const auto path = dir.write("plain-file", "text");
    auto file = tb_event_file::create(path, 1.7e9);
    REQUIRE(!file.ok());
    CHECK(file.err().message.find(path) != std::string::npos);
    CHECK(file.err().message.find(std::strerror(ENOTDIR)) != std::string::npos);
  }
}

TEST_CASE("a record the system refuses to write is an error naming the file and the "
          "system's reason") {
  temp_folder dir("tensorboard-full");
  auto file = tb_event_file::create(dir.path.string(), 1.7e9);
  REQUIRE(file.ok());
  REQUIRE(file->write_scalars(1.7e9 + 1, 10, {{"x", 0.5f}}).ok());
  const auto size = fs::file_size(file->path());
  {
    // As a full disk: the file may grow by a few bytes, less than a record.
    troupe::test::file_size_limit limit(size + 8);
    REQUIRE(limit.ok());
    auto written = file->write_scalars(1.7e9 + 2, 20, {{"x", 1.5f}, {"y", -2.5f}});
    REQUIRE(!written.ok());
    CHECK(written.err().code == troupe::errc::io_error);
    CHECK(written.err().message.find("cannot write " + file->path()) !=
          std::string::npos);
    CHECK(written.err().message.find(std::strerror(EFBIG)) != std::string::npos);
  }
  // What was written before reads back whole; the torn record is reported.
  const auto read = read_tb_events_file(file->path());
  CHECK(read.error.find("cut short") != std::string::npos);
  REQUIRE(read.events.size() == 2);
  CHECK(read.events[1].step == 10);
}
