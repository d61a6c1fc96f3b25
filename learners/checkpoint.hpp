// Policy checkpoints: an actor_critic and its observation-normalizer
// statistics in one safetensors file under PyTorch's names, with the
// architecture in "__metadata__" (format: docs/checkpoints.md).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "learners/model.hpp"
#include "learners/safetensors.hpp"
#include "learners/stats_view.hpp"

namespace troupe::learners {

/// Value of the "format" metadata key of a troupe policy checkpoint.
inline constexpr const char* checkpoint_format = "troupe.policy";

/// The format version troupe writes and the only one it reads.
inline constexpr int checkpoint_format_version = 1;

/// A loaded checkpoint: the policy and the statistics it normalizes with.
struct policy_checkpoint {
  actor_critic model;       ///< architecture, parameters and buffers
  stats_snapshot obs_stats; ///< stream "obs"; empty mean/var when obs_norm is off
  std::map<std::string, std::string> metadata; ///< the file's whole __metadata__
};

/// The "__metadata__" entries that describe `spec` (format keys included).
std::map<std::string, std::string> spec_metadata(const model_spec& spec);

/// Rebuilds a spec from metadata, with errors naming `source`, the key, the
/// expected value and the value found.
result<model_spec> spec_from_metadata(const std::map<std::string, std::string>& metadata,
                                      const std::string& source);

/// The safetensors contents of a checkpoint, with `obs_stats` (mean and var
/// of size obs_dim, finite, var >= 0) required when the spec normalizes
/// observations and `extra` metadata keys that may not redefine spec_metadata()'s.
result<st_file> make_checkpoint(const actor_critic& model,
                                const stats_snapshot* obs_stats,
                                const std::map<std::string, std::string>& extra = {});

/// Checks a safetensors file against the checkpoint format and builds the
/// policy from it, every error naming `source`, the tensor or key and what
/// was expected.
result<policy_checkpoint> checkpoint_from_file(const st_file& file,
                                               const std::string& source);

/// Writes a checkpoint to `path` (temporary file and rename, never half written).
status save_checkpoint(const std::string& path, const actor_critic& model,
                       const stats_snapshot* obs_stats,
                       const std::map<std::string, std::string>& extra = {});

/// Reads and checks the checkpoint at `path`.
result<policy_checkpoint> load_checkpoint(const std::string& path);

// -- checkpoint folders of a run (docs/checkpoints.md, "Training checkpoint folders")

/// File name of a checkpoint folder's manifest.
inline constexpr const char* checkpoint_manifest_name = "manifest.txt";

/// The complete checkpoint folders of `run_dir` (checkpoints/<digits>/), oldest
/// first by update count; "*.tmp" folders (being written) are not listed.
std::vector<std::string> checkpoint_folders(const std::string& run_dir);

/// Writes `folder`/manifest.txt listing `files` (names inside `folder`) with
/// their sizes and CRC-32s; errors name the file and the system's reason.
status write_checkpoint_manifest(const std::string& folder,
                                 const std::vector<std::string>& files);

/// Checks that every file `folder`'s manifest lists is present with its size
/// and checksum (a folder without a manifest passes), naming the file and
/// what is wrong otherwise.
status verify_checkpoint_manifest(const std::string& folder);

/// The newest checkpoint folder of `run_dir` that `check` (empty: manifest
/// only) accepts, telling each rejected one to `report`, or not_found when
/// there is none and corrupt_file when every one was rejected.
result<std::string>
newest_good_checkpoint(const std::string& run_dir,
                       const std::function<status(const std::string&)>& check,
                       const std::function<void(const std::string&)>& report);

/// The policy file that `given` names (a policy file, a checkpoint folder or
/// a run folder's newest good checkpoint, each one passed over told to
/// `report`), or errc::not_found naming `given`.
result<std::string>
resolve_policy_file(const std::string& given,
                    const std::function<void(const std::string&)>& report);

} // namespace troupe::learners
