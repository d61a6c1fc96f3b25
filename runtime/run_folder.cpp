#include "runtime/run_folder.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/metrics.hpp"
#include "learners/safetensors.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace troupe::runtime {

namespace {

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ','))
    cells.push_back(cell);
  if (!line.empty() && line.back() == ',')
    cells.emplace_back();
  return cells;
}

// A resumed run forgets the rows written after its checkpoint (the killed
// run's last moments), so that metrics.csv and metrics.jsonl stay monotonic.
// A metrics.csv written by an older troupe, whose columns differ from today's,
// is rewritten under today's header: each kept row's values move to the
// column of the same name, columns it did not have read nan (as a value
// not measured does), and columns
// troupe no longer writes are dropped (the rows the resumed run appends then
// line up with the header).
void keep_rows_up_to(const std::string& path, uint64_t updates, bool csv,
                     const std::vector<std::string>& columns) {
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  bool header = csv;
  size_t updates_column = 2;
  std::vector<long> source_of; // per current column: its index in the file, or -1
  bool remap = false;
  while (std::getline(in, line)) {
    if (in.eof())
      break; // an unterminated last line: a row being written when killed
    uint64_t row_updates = 0;
    if (header) {
      header = false;
      const auto names = split_csv_line(line);
      std::string current;
      for (size_t i = 0; i < columns.size(); ++i) {
        current += fmt::format("{}{}", i ? "," : "", columns[i]);
        auto at = std::find(names.begin(), names.end(), columns[i]);
        source_of.push_back(at == names.end() ? -1 : at - names.begin());
      }
      auto at = std::find(names.begin(), names.end(), "updates");
      if (at != names.end())
        updates_column = static_cast<size_t>(at - names.begin());
      remap = line != current;
      kept += current + "\n";
      continue;
    } else if (csv) {
      const auto cells = split_csv_line(line);
      if (updates_column >= cells.size())
        continue; // not a row of this file's header
      row_updates = std::strtoull(cells[updates_column].c_str(), nullptr, 10);
      if (remap && row_updates <= updates) {
        std::string row;
        for (size_t i = 0; i < source_of.size(); ++i) {
          if (i)
            row += ',';
          if (source_of[i] >= 0 && static_cast<size_t>(source_of[i]) < cells.size())
            row += cells[static_cast<size_t>(source_of[i])];
          else
            row += "nan";
        }
        line = row;
      }
    } else {
      // A line that is not a JSON object with a whole "updates" count is
      // dropped, as a row from after the checkpoint would be.
      auto row = nlohmann::json::parse(line, nullptr, false);
      if (!row.is_object() || !row.contains("updates") ||
          !row["updates"].is_number_unsigned())
        continue;
      row_updates = row["updates"].get<uint64_t>();
    }
    if (row_updates <= updates)
      kept += line + "\n";
  }
  in.close();
  if (kept.empty()) {
    std::error_code ec;
    fs::remove(path, ec); // no header survived: the metrics actor writes a new one
    return;
  }
  (void)learners::write_file_atomically(path, kept.data(), kept.size());
}

} // namespace

result<run_folder_lock> run_folder_lock::take(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error, "cannot open {}: {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    holder.erase(std::remove(holder.begin(), holder.end(), '\n'), holder.end());
    if (why == EWOULDBLOCK)
      return make_error(errc::unavailable,
                        "run folder {} is in use by another troupe process (pid {}, "
                        "which holds {}); two processes writing one run would mix "
                        "their checkpoints and metrics",
                        run_dir, holder, path);
    return make_error(errc::io_error, "cannot lock {}: {}", path, std::strerror(why));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; only a refused process's message lacks it.
  }
  return run_folder_lock(fd);
}

run_folder_lock::run_folder_lock(run_folder_lock&& o) noexcept : fd_(o.fd_) {
  o.fd_ = -1;
}

run_folder_lock& run_folder_lock::operator=(run_folder_lock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

run_folder_lock::~run_folder_lock() {
  if (fd_ >= 0)
    ::close(fd_); // releases the lock
}

result<std::string> create_run_folder(const config& cfg) {
  const fs::path out = cfg.get_string("run.output_dir");
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec)
    return make_error(errc::io_error, "cannot create {}: {}", out.string(), ec.message());
  // create_directory claims a name atomically: two runs started in the same
  // second by two processes get two folders.
  std::string run_dir = (out / (cfg.get_string("run.name") + "-" + timestamp())).string();
  for (int k = 2; !fs::create_directory(run_dir, ec); ++k) {
    if (ec)
      return make_error(errc::io_error, "cannot create {}: {}", run_dir, ec.message());
    run_dir = (out / fmt::format("{}-{}-{}", cfg.get_string("run.name"), timestamp(), k))
                .string();
  }
  fs::create_directories(fs::path(run_dir) / "checkpoints", ec);
  if (ec)
    return make_error(errc::io_error, "cannot create {}: {}", run_dir, ec.message());
  const std::string text = cfg.to_toml();
  if (auto ok = learners::write_file_atomically(
        (fs::path(run_dir) / "config.toml").string(), text.data(), text.size());
      !ok)
    return ok.err();
  return run_dir;
}

status ensure_checkpoints_folder(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(fs::path(run_dir) / "checkpoints", ec);
  if (ec)
    return make_error(errc::io_error, "cannot create {}: {}",
                      (fs::path(run_dir) / "checkpoints").string(), ec.message());
  return {};
}

void trim_host_rows(const std::string& run_dir, uint64_t env_steps) {
  const auto path = (fs::path(run_dir) / "hosts.csv").string();
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (in.eof())
      break; // an unterminated last line: a row being written when killed
    if (header) {
      header = false;
      kept += line + "\n";
      continue;
    }
    // wall_time_s, env_steps, then the host (quoted when it needs to be).
    const auto first = line.find(',');
    const auto second = first == std::string::npos ? first : line.find(',', first + 1);
    if (second == std::string::npos)
      continue;
    const auto cell = line.substr(first + 1, second - first - 1);
    char* end = nullptr;
    const auto steps = std::strtoull(cell.c_str(), &end, 10);
    if (cell.empty() || *end != '\0' || steps > env_steps)
      continue;
    kept += line + "\n";
  }
  in.close();
  (void)learners::write_file_atomically(path, kept.data(), kept.size());
}

void trim_metrics(const std::string& run_dir, uint64_t updates,
                  const std::vector<std::string>& columns) {
  keep_rows_up_to((fs::path(run_dir) / "metrics.csv").string(), updates, true, columns);
  keep_rows_up_to((fs::path(run_dir) / "metrics.jsonl").string(), updates, false,
                  columns);
}

} // namespace troupe::runtime
