#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "learners/safetensors.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::temp_folder;
namespace fs = std::filesystem;

namespace {

// A safetensors image assembled by hand: length, header text, data bytes.
std::vector<std::byte> assemble(const std::string& header,
                                const std::vector<std::byte>& data) {
  std::vector<std::byte> out(8 + header.size() + data.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty())
    std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), values.data(), out.size());
  return out;
}

troupe::result<st_file> parse(const std::vector<std::byte>& image) {
  return parse_safetensors(image.data(), image.size(), "mem.safetensors");
}

// The error message of parsing `image`; fails the test when it parses.
std::string parse_error(const std::string& header, const std::vector<std::byte>& data) {
  auto got = parse(assemble(header, data));
  REQUIRE_MESSAGE(!got, "expected an error for header ", header);
  CHECK(got.err().code == troupe::errc::corrupt_file);
  CHECK(got.err().message.find("mem.safetensors") != std::string::npos);
  return got.err().message;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

st_file random_file(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> dim(0, 5);
  st_file file;
  file.metadata["format"] = "test";
  file.metadata["quote\"and\\slash"] = "line\nbreak\ttab \x01 \xc3\xa9t\xc3\xa9";
  for (int i = 0; i < 9; ++i) {
    std::vector<int64_t> shape;
    int rank = i % 4; // scalars, vectors, matrices, rank 3
    for (int r = 0; r < rank; ++r)
      shape.push_back(dim(rng));
    size_t n = 1;
    for (auto d : shape)
      n *= static_cast<size_t>(d);
    auto name = "layer." + std::to_string(i) + ".w";
    if (i % 3 == 0) {
      std::vector<float> v(n);
      for (auto& x : v)
        x = static_cast<float>(normal(rng));
      file.tensors.push_back(st_tensor::from_f32(name, shape, v.data()));
    } else if (i % 3 == 1) {
      std::vector<double> v(n);
      for (auto& x : v)
        x = normal(rng);
      file.tensors.push_back(st_tensor::from_f64(name, shape, v.data()));
    } else {
      std::vector<int64_t> v(n);
      for (auto& x : v)
        x = static_cast<int64_t>(rng());
      file.tensors.push_back(st_tensor::from_i64(name, shape, v.data()));
    }
  }
  return file;
}

} // namespace

TEST_CASE("a file written by troupe reads back with the same tensors and metadata") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("st");
  auto file = random_file(rng);
  auto path = (dir.path / "round.safetensors").string();
  REQUIRE(write_safetensors(path, file));
  auto back = read_safetensors(path);
  REQUIRE_MESSAGE(back.has_value(), (back ? std::string() : back.err().message));
  CHECK(back->metadata == file.metadata);
  REQUIRE(back->tensors.size() == file.tensors.size());
  for (auto& want : file.tensors) {
    CAPTURE(want.name);
    auto* got = back->find(want.name);
    REQUIRE(got != nullptr);
    CHECK(got->dtype == want.dtype);
    CHECK(got->shape == want.shape);
    CHECK(got->bytes == want.bytes);
  }
  // Nothing but the destination is left in the folder.
  size_t entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir.path))
    ++entries;
  CHECK(entries == 1);
}

TEST_CASE("the written image follows the format's layout byte for byte") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(6);
  for (auto& x : w)
    x = normal(rng);
  std::vector<int64_t> steps{static_cast<int64_t>(rng() >> 1)};
  st_file file;
  file.metadata["k"] = "v";
  file.tensors.push_back(st_tensor::from_f32("w", {2, 3}, w.data()));
  file.tensors.push_back(st_tensor::from_i64("steps", {}, steps.data()));
  auto image = serialize_safetensors(file);
  REQUIRE(image);
  auto& b = *image;
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<uint8_t>(b[i]);
  REQUIRE(8 + header_len <= b.size());
  CHECK((8 + header_len) % 8 == 0);
  std::string header(reinterpret_cast<const char*>(b.data()) + 8, header_len);
  auto end = header.find_last_not_of(' ');
  CHECK(header.substr(0, end + 1) ==
        "{\"__metadata__\":{\"k\":\"v\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"steps\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}");
  REQUIRE(b.size() == 8 + header_len + 32);
  CHECK(std::memcmp(b.data() + 8 + header_len, w.data(), 24) == 0);
  CHECK(std::memcmp(b.data() + 8 + header_len + 24, steps.data(), 8) == 0);
}

TEST_CASE("a file assembled by hand as another writer would reads correctly") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> mean{normal(rng), normal(rng), normal(rng)};
  std::vector<float> bias{static_cast<float>(normal(rng)),
                          static_cast<float>(normal(rng))};
  // Offsets listed out of order, whitespace and escapes as Python's json emits.
  std::string header =
    "{\"obs_rms.mean\": {\"dtype\": \"F64\", \"shape\": [3], \"data_offsets\": [8, "
    "32]},\n"
    " \"__metadata__\": {\"name\": \"caf\\u00e9 \\ud83d\\ude00 \\\"x\\\"\"},\n"
    " \"b\": {\"shape\": [2], \"data_offsets\": [0, 8], \"dtype\": \"F32\"}}   ";
  auto data = bytes_of(bias);
  auto rest = bytes_of(mean);
  data.insert(data.end(), rest.begin(), rest.end());
  auto got = parse(assemble(header, data));
  REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.err().message));
  CHECK(got->metadata.at("name") == "caf\xc3\xa9 \xf0\x9f\x98\x80 \"x\"");
  REQUIRE(got->tensors.size() == 2);
  CHECK(got->tensors[0].name == "b"); // file (offset) order
  CHECK(got->find("b")->to_f32() == bias);
  CHECK(got->find("obs_rms.mean")->to_f64() == mean);
  CHECK(got->find("obs_rms.mean")->shape == std::vector<int64_t>{3});
}

TEST_CASE("a malformed length field or header is an error naming the file") {
  std::vector<std::byte> tiny(5);
  auto short_file = parse(tiny);
  REQUIRE(!short_file);
  CHECK(contains(short_file.err().message, "too short"));

  auto image = assemble("{}", {});
  image[0] = std::byte{200}; // header length beyond the file
  auto beyond = parse(image);
  REQUIRE(!beyond);
  CHECK(contains(beyond.err().message, "goes beyond the end of the file"));

  auto huge = assemble("{}", {});
  for (int i = 0; i < 8; ++i)
    huge[i] = std::byte{0xff};
  auto too_big = parse(huge);
  REQUIRE(!too_big);
  CHECK(contains(too_big.err().message, "exceeds the limit"));

  CHECK(contains(parse_error("[1, 2]", {}), "JSON object"));
  CHECK(contains(parse_error("{\"a\": ", {}), "malformed JSON"));
  CHECK(contains(parse_error("{\"a\": {}} x", {}), "unexpected characters"));
  CHECK(contains(parse_error("{\"a\": tru}", {}), "invalid literal"));
  CHECK(contains(parse_error("{\"a\": 01}", {}), "malformed JSON"));
  CHECK(contains(parse_error("{\"a\": \"\\q\"}", {}), "invalid escape"));
  CHECK(contains(parse_error("{\"a\": \"\\ud800\"}", {}), "surrogate"));
  CHECK(contains(parse_error("{\"a\": \"x\ny\"}", {}), "control character"));
  CHECK(contains(parse_error("{\"a\xff\": 1}", {}), "invalid UTF-8"));
  CHECK(contains(parse_error("{\"a\": 1, \"a\": 2}", {}), "duplicate key \"a\""));
  CHECK(contains(parse_error("{\"a\": " + std::string(100, '['), {}), "nested deeper"));
  CHECK(contains(parse_error("{\"__metadata__\": [1]}", {}), "__metadata__ must be"));
  CHECK(contains(parse_error("{\"__metadata__\": {\"k\": 3}}", {}),
                 "__metadata__ entry \"k\" must be a string"));
}

TEST_CASE(
  "a file that is not safetensors is reported as not a safetensors file, with its "
  "path") {
  temp_folder dir("safetensors-other");
  // A config handed over in place of a policy: "[run]\nse" read as a length
  // is 7,306,000,000,000,000,000 or so; byte 8 is the 'e' of "seed".
  const auto toml = (dir.path / "policy.safetensors").string();
  {
    std::ofstream out(toml, std::ios::binary);
    out << "[run]\nseed = 5\n[env]\nid = \"CartPole-v1\"\n";
  }
  auto got = read_safetensors(toml);
  REQUIRE(!got);
  CHECK(got.err().code == troupe::errc::corrupt_file);
  CHECK(contains(got.err().message, toml + ": not a safetensors file"));
  CHECK(contains(got.err().message, "byte 8 is 'e'"));
  CHECK_FALSE(contains(got.err().message, "exceeds the limit"));

  // Random bytes whose ninth is not '{', and a '{' behind an implausible length.
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<std::byte> noise(64);
  for (auto& b : noise)
    b = static_cast<std::byte>(rng() & 0xff);
  if (noise[8] == std::byte{'{'})
    noise[8] = std::byte{'}'};
  auto random = parse(noise);
  REQUIRE(!random);
  CHECK(contains(random.err().message, "mem.safetensors: not a safetensors file"));

  auto image = assemble("{}", {});
  const uint64_t huge = st_max_header_bytes + 1 + rng() % 1000000;
  for (int i = 0; i < 8; ++i)
    image[i] = static_cast<std::byte>((huge >> (8 * i)) & 0xff);
  auto implausible = parse(image);
  REQUIRE(!implausible);
  CHECK(contains(implausible.err().message, "mem.safetensors: not a safetensors file"));
  CHECK(contains(implausible.err().message, std::to_string(huge)));
}

TEST_CASE("a malformed tensor entry is an error naming the tensor and the expectation") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<float> four(4);
  for (auto& x : four)
    x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  auto data = bytes_of(four); // 16 bytes

  auto msg = parse_error("{\"w\": {\"dtype\": \"F31\", \"shape\": [4], "
                         "\"data_offsets\": [0, 16]}}",
                         data);
  CHECK(contains(msg, "tensor 'w'"));
  CHECK(contains(msg, "unknown dtype \"F31\""));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [5], "
                    "\"data_offsets\": [0, 16]}}",
                    data);
  CHECK(contains(msg, "tensor 'w'"));
  CHECK(contains(msg, "needs 20 bytes"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [-4], "
                    "\"data_offsets\": [0, 16]}}",
                    data);
  CHECK(contains(msg, "shape[0] must be a non-negative integer"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], "
                    "\"data_offsets\": [0, 16]}}",
                    data);
  CHECK(contains(msg, "shape[0] must be a non-negative integer, got 2.5"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], "
                    "\"data_offsets\": [0, 16], \"extra\": 1}}",
                    data);
  CHECK(contains(msg, "unknown field \"extra\""));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 16]}}", data);
  CHECK(contains(msg, "missing field \"shape\""));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], "
                    "\"data_offsets\": [16, 0]}}",
                    data);
  CHECK(contains(msg, "end before they begin"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], "
                    "\"data_offsets\": [8, 24]}}",
                    data);
  CHECK(contains(msg, "go beyond the data buffer of 16 bytes"));

  msg = parse_error(
    "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
    " \"v\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [4, 16]}}",
    data);
  CHECK(contains(msg, "tensor 'v'"));
  CHECK(contains(msg, "overlap tensor 'w'"));

  msg = parse_error(
    "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
    " \"v\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
    data);
  CHECK(contains(msg, "tensor 'v'"));
  CHECK(contains(msg, "gap of 4 bytes"));

  msg = parse_error(
    "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", data);
  CHECK(contains(msg, "cover 8 bytes of the 16-byte data buffer"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [99999999999, 99999999999, "
                    "99999999999], \"data_offsets\": [0, 16]}}",
                    data);
  CHECK(contains(msg, "too many elements"));

  msg = parse_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], "
                    "\"data_offsets\": [0, 99999999999999999999]}}",
                    data);
  CHECK(contains(msg, "data_offsets must hold two non-negative integers"));
}

TEST_CASE("truncated or corrupted files never crash the reader") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto image = serialize_safetensors(random_file(rng));
  REQUIRE(image);
  size_t errors = 0;
  for (size_t cut = 0; cut < image->size(); ++cut) {
    auto got = parse_safetensors(image->data(), cut, "cut.safetensors");
    errors += got ? 0 : 1;
  }
  // Every strict prefix loses bytes the tiling rule needs.
  CHECK(errors == image->size());
  std::uniform_int_distribution<size_t> where(0, image->size() - 1);
  for (int trial = 0; trial < 3000; ++trial) {
    auto copy = *image;
    for (int k = 0; k < 1 + trial % 4; ++k)
      copy[where(rng)] = static_cast<std::byte>(rng() & 0xff);
    auto got = parse_safetensors(copy.data(), copy.size(), "flipped.safetensors");
    if (!got)
      CHECK(contains(got.err().message, "flipped.safetensors"));
  }
}

TEST_CASE("writing refuses inconsistent tensors and leaves no file behind") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  temp_folder dir("st");
  std::vector<float> v{1.5f, -2.0f, 0.25f};
  st_file dup;
  dup.tensors.push_back(st_tensor::from_f32("a", {3}, v.data()));
  dup.tensors.push_back(st_tensor::from_f32("a", {3}, v.data()));
  auto path = (dir.path / "dup.safetensors").string();
  auto s = write_safetensors(path, dup);
  REQUIRE(!s);
  CHECK(contains(s.err().message, "tensor 'a' appears twice"));

  st_file bad_size;
  bad_size.tensors.push_back(st_tensor::from_f32("a", {3}, v.data()));
  bad_size.tensors[0].shape = {2, 2};
  s = write_safetensors(path, bad_size);
  REQUIRE(!s);
  CHECK(contains(s.err().message, "shape [2, 2] of F32 does not match its 12 bytes"));

  st_file reserved;
  reserved.tensors.push_back(st_tensor::from_f32("__metadata__", {3}, v.data()));
  CHECK(!write_safetensors(path, reserved));

  // Bytes that are not UTF-8 would make a header no reader accepts.
  st_file latin1;
  latin1.tensors.push_back(st_tensor::from_f32("caf\xe9", {3}, v.data()));
  s = write_safetensors(path, latin1);
  REQUIRE(!s);
  CHECK(contains(s.err().message, "not UTF-8"));
  st_file latin1_meta;
  latin1_meta.metadata["note"] = "\xff";
  latin1_meta.tensors.push_back(st_tensor::from_f32("a", {3}, v.data()));
  CHECK(!write_safetensors(path, latin1_meta));
  CHECK(fs::is_empty(dir.path));

  auto missing = (dir.path / "no" / "such" / "x.safetensors").string();
  st_file ok;
  ok.tensors.push_back(st_tensor::from_f32("a", {3}, v.data()));
  s = write_safetensors(missing, ok);
  REQUIRE(!s);
  CHECK(s.err().code == troupe::errc::io_error);

  auto absent = read_safetensors((dir.path / "absent.safetensors").string());
  REQUIRE(!absent);
  CHECK(absent.err().code == troupe::errc::not_found);
  CHECK(contains(absent.err().message, "absent.safetensors"));
}

TEST_CASE("writing over an existing file replaces it whole") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("st");
  auto path = (dir.path / "policy.safetensors").string();
  auto first = random_file(rng);
  auto second = random_file(rng);
  second.metadata["format"] = "second";
  REQUIRE(write_safetensors(path, first));
  REQUIRE(write_safetensors(path, second));
  auto back = read_safetensors(path);
  REQUIRE(back);
  CHECK(back->metadata.at("format") == "second");
  for (auto& t : second.tensors)
    CHECK(back->find(t.name)->bytes == t.bytes);
}

TEST_CASE("write_file_atomically replaces a file whole and leaves no temporary file") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("st");
  auto path = (dir.path / "state.bin").string();
  auto random_bytes = [&](size_t n) {
    std::string bytes(n, '\0');
    for (auto& b : bytes)
      b = static_cast<char>(rng() & 0xff);
    return bytes;
  };
  for (size_t size : {size_t{100000}, size_t{17}, size_t{0}}) {
    CAPTURE(size);
    auto bytes = random_bytes(size);
    REQUIRE(write_file_atomically(path, bytes.data(), bytes.size()));
    std::ifstream in(path, std::ios::binary);
    std::string back((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    CHECK(back == bytes);
    size_t files = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator(dir.path))
      ++files;
    CHECK(files == 1);
  }

  auto missing = (dir.path / "no" / "such" / "x.bin").string();
  auto failed = write_file_atomically(missing, "x", 1);
  REQUIRE_FALSE(failed);
  CHECK(failed.err().code == troupe::errc::io_error);
  CHECK(contains(failed.err().message, missing));
  CHECK_FALSE(fs::exists(missing));
}
