// TensorBoard event files, written without TensorFlow: CRC-32C, the TFRecord
// framing and the few fields of the Event and Summary protos that scalars
// need, encoded by hand (docs/training.md, "TensorBoard").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace troupe::learners {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `size` bytes at
/// `data`, continuing from `crc` (0 to begin); CRC32C("123456789") = 0xe3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0) noexcept;

/// The CRC-32C of `size` bytes as TFRecord stores it:
/// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t tfrecord_masked_crc(const void* data, size_t size) noexcept;

/// One TFRecord around `payload`: its length (uint64 little-endian), the
/// masked CRC of those 8 bytes, the payload, the masked CRC of the payload.
std::string tfrecord_frame(std::string_view payload);

/// One scalar of an event: Summary.Value{tag, simple_value}.
struct tb_scalar {
  std::string tag; ///< the name TensorBoard plots it under
  float value = 0; ///< the value at the event's step
};

/// The serialized Event that opens every events file:
/// {wall_time, file_version: "brain.Event:2"}.
std::string tb_file_version_event(double wall_time);

/// A serialized Event {wall_time, step, session_log {status: START}} for a
/// run that starts again at `step`, after which TensorBoard drops the points
/// of earlier files at `step` and later.
std::string tb_session_start_event(double wall_time, int64_t step);

/// A serialized Event {wall_time, step, summary {value {tag, simple_value}...}}.
std::string tb_scalars_event(double wall_time, int64_t step,
                             const std::vector<tb_scalar>& scalars);

/// `events.out.tfevents.<unix_seconds>.<host>`, TensorFlow's name of an
/// events file ('/' in the host name becomes '_').
std::string tb_events_file_name(int64_t unix_seconds, std::string_view host);

/// An events file open for appending records, each handed to the system in
/// one write so that a killed process leaves at most the last one cut short.
class tb_event_file {
public:
  /// Creates a new events file in `folder`, named for `wall_time` (unix
  /// seconds) and the host name with a suffix `.1`, `.2`, ... when taken, and
  /// writes the file_version record.
  static result<tb_event_file> create(const std::string& folder, double wall_time);

  tb_event_file(tb_event_file&& other) noexcept;
  tb_event_file& operator=(tb_event_file&& other) noexcept;
  tb_event_file(const tb_event_file&) = delete;
  tb_event_file& operator=(const tb_event_file&) = delete;
  ~tb_event_file();

  /// Appends one Event of `scalars` at `step`; the error names the file and
  /// the system's reason.
  status write_scalars(double wall_time, int64_t step,
                       const std::vector<tb_scalar>& scalars);

  /// Appends `payload` (a serialized Event) as one record.
  status write_record(std::string_view payload);

  /// The file's path.
  const std::string& path() const noexcept { return path_; }

private:
  tb_event_file(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

} // namespace troupe::learners
