// The model files of envs/mujoco/models/, built into the library as text by
// envs/mujoco/embed_models.cmake, so that a task finds its model without a
// path to look up at run time.
#pragma once

#include <string_view>
#include <vector>

namespace troupe::envs::mujoco {

/// One model file: its name in envs/mujoco/models/ and its MJCF text.
struct model_file {
  std::string_view name; ///< e.g. "half_cheetah.xml"
  std::string_view text; ///< the file's bytes
};

/// Every model file of envs/mujoco/models/, sorted by name.
const std::vector<model_file>& builtin_model_files();

} // namespace troupe::envs::mujoco
