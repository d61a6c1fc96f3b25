#include "learners/tensorboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace troupe::learners {

// -- CRC-32C ---------------------------------------------------------------
// A table-driven software CRC (one byte a step): Debian 12 packages no C or
// C++ CRC-32C library, and an events row is a few hundred bytes a second.

namespace {

constexpr uint32_t crc32c_polynomial = 0x82f63b78; // reflected 0x1edc6f41

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ crc32c_polynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> crc32c_table = make_crc32c_table();

} // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i)
    crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t tfrecord_masked_crc(const void* data, size_t size) noexcept {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// -- TFRecord and protobuf encoding ------------------------------------------

namespace {

void put_le(std::string& out, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t x) {
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7f) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
}

// Protobuf wire types.
enum wire : uint32_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

void put_tag(std::string& out, uint32_t field, wire type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_tag(out, field, length_delimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

void put_double(std::string& out, uint32_t field, double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_tag(out, field, fixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_tag(out, field, fixed32);
  put_le(out, bits, 4);
}

// Field numbers of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto.
constexpr uint32_t event_wall_time = 1;    // double
constexpr uint32_t event_step = 2;         // int64
constexpr uint32_t event_file_version = 3; // string
constexpr uint32_t event_summary = 5;      // Summary
constexpr uint32_t event_session_log = 7;  // SessionLog
constexpr uint32_t session_log_status = 1; // SessionLog.SessionStatus
constexpr uint64_t session_start = 1;      // SessionLog.START
constexpr uint32_t summary_value = 1;      // repeated Summary.Value
constexpr uint32_t value_tag = 1;          // string
constexpr uint32_t value_simple_value = 2; // float

} // namespace

std::string tfrecord_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, tfrecord_masked_crc(out.data(), 8), 4);
  out.append(payload.data(), payload.size());
  put_le(out, tfrecord_masked_crc(payload.data(), payload.size()), 4);
  return out;
}

std::string tb_file_version_event(double wall_time) {
  std::string out;
  put_double(out, event_wall_time, wall_time);
  put_bytes(out, event_file_version, "brain.Event:2");
  return out;
}

std::string tb_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_tag(session_log, session_log_status, varint);
  put_varint(session_log, session_start);
  std::string out;
  put_double(out, event_wall_time, wall_time);
  put_tag(out, event_step, varint);
  put_varint(out, static_cast<uint64_t>(step));
  put_bytes(out, event_session_log, session_log);
  return out;
}

std::string tb_scalars_event(double wall_time, int64_t step,
                             const std::vector<tb_scalar>& scalars) {
  std::string summary;
  for (const auto& s : scalars) {
    std::string value;
    put_bytes(value, value_tag, s.tag);
    put_float(value, value_simple_value, s.value);
    put_bytes(summary, summary_value, value);
  }
  std::string out;
  put_double(out, event_wall_time, wall_time);
  put_tag(out, event_step, varint);
  put_varint(out, static_cast<uint64_t>(step)); // int64: two's complement
  put_bytes(out, event_summary, summary);
  return out;
}

std::string tb_events_file_name(int64_t unix_seconds, std::string_view host) {
  std::string name(host.empty() ? std::string_view("localhost") : host);
  for (auto& c : name)
    if (c == '/')
      c = '_';
  return fmt::format("events.out.tfevents.{}.{}", unix_seconds, name);
}

// -- the file ----------------------------------------------------------------

result<tb_event_file> tb_event_file::create(const std::string& folder, double wall_time) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
  const std::string base =
    (std::filesystem::path(folder) /
     tb_events_file_name(static_cast<int64_t>(std::floor(wall_time)), host))
      .string();
  // O_EXCL: a resumed run (or a second writer in the same second) starts a
  // file of its own instead of writing into one that exists.
  for (int suffix = 0; suffix < 1000; ++suffix) {
    std::string path = suffix == 0 ? base : fmt::format("{}.{}", base, suffix);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST)
        continue;
      return make_error(errc::io_error, "cannot create {}: {}", path,
                        std::strerror(errno));
    }
    tb_event_file file(fd, std::move(path));
    if (auto written = file.write_record(tb_file_version_event(wall_time)); !written)
      return written.err();
    return result<tb_event_file>(std::move(file));
  }
  return make_error(errc::io_error, "cannot create {}: 1000 files of that name exist",
                    base);
}

tb_event_file::tb_event_file(tb_event_file&& other) noexcept
  : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

tb_event_file& tb_event_file::operator=(tb_event_file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

tb_event_file::~tb_event_file() {
  if (fd_ >= 0)
    ::close(fd_);
}

status tb_event_file::write_record(std::string_view payload) {
  if (fd_ < 0)
    return make_error(errc::io_error, "cannot write {}: the file is closed", path_);
  const std::string record = tfrecord_frame(payload);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return make_error(errc::io_error, "cannot write {}: {}", path_,
                        n < 0 ? std::strerror(errno) : "no byte written");
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

status tb_event_file::write_scalars(double wall_time, int64_t step,
                                    const std::vector<tb_scalar>& scalars) {
  return write_record(tb_scalars_event(wall_time, step, scalars));
}

} // namespace troupe::learners
