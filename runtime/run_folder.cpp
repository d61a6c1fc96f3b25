#include "runtime/run_folder.hpp"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "learners/safetensors.hpp"

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

// A resumed run forgets the rows written after its checkpoint (the killed
// run's last moments), so that metrics.csv and metrics.jsonl stay monotonic.
void keep_rows_up_to(const std::string& path, uint64_t updates, bool csv) {
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  bool header = csv;
  while (std::getline(in, line)) {
    if (in.eof())
      break; // an unterminated last line: a row being written when killed
    uint64_t row_updates = 0;
    if (header) {
      header = false;
    } else if (csv) {
      std::istringstream cells(line);
      std::string cell;
      for (int i = 0; i < 3 && std::getline(cells, cell, ','); ++i) {
      }
      row_updates = std::strtoull(cell.c_str(), nullptr, 10);
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

result<std::string> create_run_folder(const config& cfg) {
  std::string run_dir = (fs::path(cfg.get_string("run.output_dir")) /
                         (cfg.get_string("run.name") + "-" + timestamp()))
                          .string();
  std::error_code ec;
  for (int k = 2; fs::exists(run_dir); ++k)
    run_dir = (fs::path(cfg.get_string("run.output_dir")) /
               fmt::format("{}-{}-{}", cfg.get_string("run.name"), timestamp(), k))
                .string();
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

void trim_metrics(const std::string& run_dir, uint64_t updates) {
  keep_rows_up_to((fs::path(run_dir) / "metrics.csv").string(), updates, true);
  keep_rows_up_to((fs::path(run_dir) / "metrics.jsonl").string(), updates, false);
}

} // namespace troupe::runtime
