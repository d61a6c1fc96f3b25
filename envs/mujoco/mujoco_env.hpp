// The shared base of the MuJoCo tasks, with Gymnasium's v4 semantics
// (gymnasium/envs/mujoco/mujoco_env.py): model loading, reset, frame skip,
// state save and restore. A task (envs/mujoco/half_cheetah.hpp is the
// template to copy) derives from mujoco_task and adds its spec, its reset
// noise, its observation, reward and termination; it is then an environment
// model of envs/model.hpp, registered in envs/mujoco/tasks.cpp.
//
// Models are compiled once per process and shared read-only by every
// instance of a task; each instance owns its mjData. MuJoCo's warnings
// (instabilities, full contact buffers) are counted here, never printed;
// its fatal errors become the instance's failure, which the adapters of
// envs/model.hpp return as an error value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mujoco/mujoco.h>

#include "envs/model.hpp"

namespace troupe::envs::mujoco {

/// A compiled model, shared read-only by the instances of a task.
using model_ptr = std::shared_ptr<const mjModel>;

/// Compiles the MJCF text `xml`; `name` stands for it in errors.
/// errc::invalid_argument naming `name` with MuJoCo's own message when the
/// text does not compile.
result<model_ptr> compile_model(std::string_view xml, const std::string& name);

/// Loads and compiles the MJCF file at `path`. errc::not_found naming the
/// path when there is no such file; errc::invalid_argument naming it with
/// MuJoCo's own message when it does not compile.
result<model_ptr> load_model_file(const std::string& path);

/// The model file `name` of envs/mujoco/models/ built into the library,
/// compiled on first use and kept for the life of the process.
/// errc::not_found listing the built-in files when there is none of that name.
result<model_ptr> builtin_model(const std::string& name);

/// Trouble met while stepping, counted over every MuJoCo task of the process.
struct trouble_counts {
  uint64_t instability_warnings = 0;    ///< MuJoCo's bad qpos, qvel or qacc warnings
                                        ///< (MuJoCo then resets the data itself)
  uint64_t other_warnings = 0;          ///< MuJoCo's other warnings (singular inertia,
                                        ///< contact or constraint buffers full)
  uint64_t non_finite_observations = 0; ///< steps whose state came out non-finite
                                        ///< (the episode terminates)
};

/// The counts so far; they only grow.
trouble_counts trouble() noexcept;

/// A standard normal draw (Marsaglia's polar method; two or more uniform
/// draws of `r`), as numpy's Generator.standard_normal is used in v4's resets.
double standard_normal(rng& r) noexcept;

/// The state names of a task whose joints each have one position and one
/// velocity (hinges and slides): "qpos.<joint>", "qvel.<joint>", then
/// "qacc_warmstart.<joint>", the order of mujoco_task::get_state.
std::vector<std::string>
hinge_and_slide_state_names(const std::vector<std::string>& joints);

/// A joint as the state names see it: its name and its type.
struct named_joint {
  std::string name; ///< the joint's name in the model file
  mjtJoint type;    ///< free, ball, slide or hinge
};

/// The state names of joints in model order, as mujoco_task::get_state
/// writes them: "qpos.<joint>" per position, "qvel.<joint>" then
/// "qacc_warmstart.<joint>" per degree of freedom. A hinge or slide has one
/// of each (the names hinge_and_slide_state_names gives); a free joint has
/// positions <joint>.x, .y, .z, .qw, .qx, .qy, .qz and velocities .vx, .vy,
/// .vz, .wx, .wy, .wz; a ball joint .qw, .qx, .qy, .qz and .wx, .wy, .wz.
/// A task's make_spec() lists its joints by hand, so that no model is
/// compiled to register it (tests/envs/mujoco_models.test.cpp compares each
/// list with the compiled model's joints).
std::vector<std::string> joint_state_names(const std::vector<named_joint>& joints);

/// joint_state_names of a compiled model's joints.
std::vector<std::string> joint_state_names(const mjModel& m);

/// The number of models MuJoCo's compiler was asked to compile so far in
/// this process (compile_model calls, built-in files included): what tells
/// that registering and listing the environments compiles none.
uint64_t models_compiled() noexcept;

/// The sum of x[0..n), in the order of NumPy's pairwise summation
/// (np.sum of a contiguous array: sequential below 8 values; up to 128,
/// eight interleaved partial sums added as a tree, then the remainder;
/// beyond, the two halves' sums), so that a float32 cost equals NumPy's to
/// the last bit.
template <class T>
T numpy_sum(const T* x, int n) noexcept {
  if (n > 128) {
    const int half = n / 2 - (n / 2) % 8;
    return numpy_sum(x, half) + numpy_sum(x + half, n - half);
  }
  if (n < 8) {
    T sum = T(-0.0);
    for (int i = 0; i < n; ++i)
      sum += x[i];
    return sum;
  }
  T r[8];
  for (int j = 0; j < 8; ++j)
    r[j] = x[j];
  int i = 8;
  for (; i < n - n % 8; i += 8)
    for (int j = 0; j < 8; ++j)
      r[j] += x[i + j];
  T sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; ++i)
    sum += x[i];
  return sum;
}

/// v4's float32 control cost of `NU` float32 actions:
/// float32(weight) * np.sum(np.square(action)), with NumPy 2's rules (a
/// Python float times a float32 scalar is float32) and NumPy's summation
/// order, so that it equals Gymnasium's to the last bit.
template <int NU>
float float32_control_cost(double weight, const float* action) noexcept {
  float squares[NU];
  for (int i = 0; i < NU; ++i)
    squares[i] = action[i] * action[i];
  return static_cast<float>(weight) * numpy_sum(squares, NU);
}

/// Leaves `d` byte for byte as mj_resetData would (MuJoCo 2.2.2) without
/// zeroing the contact and constraint rows that no step since the last reset
/// wrote (docs/environments.md, "Reset without zeroing 3.2 MB").
void reset_data(const mjModel& m, mjData& d) noexcept;

/// Makes every task reset with mj_resetData itself (true) or reset_data
/// (false, the default), process-wide: for the tests that prove them
/// bit-identical and for benchmarks.
void reset_with_mj_resetData(bool on) noexcept;

/// The compiled model and frame skip of a task: what a bare loop of mj_step
/// needs to step the same physics.
struct task_physics {
  model_ptr model;    ///< the task's compiled model
  int frame_skip = 0; ///< mj_step calls per env step
};

/// What every task shares: the compiled model, an mjData, the frame skip.
/// Move-only. A task's state is (qpos, qvel, qacc_warmstart): Gymnasium's
/// state_vector() followed by the constraint solver's warm start, without
/// which a restored episode would not continue bit for bit.
class mujoco_task {
public:
  /// A step takes tens of microseconds, a thread hand-off a few: a vector
  /// env of MuJoCo tasks uses every thread it is given from one task each.
  static constexpr size_t min_envs_per_thread = 1;

  /// An instance of the built-in model file `model_file` stepped `frame_skip`
  /// times a step. The built-in files compile (tests/envs/mujoco_models.test.cpp);
  /// one that did not would stop the process with the file's name and
  /// MuJoCo's message.
  mujoco_task(const char* model_file, int frame_skip);

  /// An instance of the compiled model `model` stepped `frame_skip` times a
  /// step (a model of the caller's own: load_model_file, compile_model).
  mujoco_task(model_ptr model, int frame_skip);

  mujoco_task(mujoco_task&&) noexcept = default;
  mujoco_task& operator=(mujoco_task&&) noexcept = default;

  /// The compiled model.
  const mjModel& model() const noexcept { return *model_; }

  /// The simulation data, for tests and tasks.
  const mjData& data() const noexcept { return *data_; }

  /// The compiled model and frame skip.
  task_physics physics() const { return {model_, frame_skip_}; }

  /// Seconds of simulated time a step takes: timestep * frame_skip, as v4's `dt`.
  double dt() const noexcept { return model_->opt.timestep * frame_skip_; }

  /// Writes (qpos, qvel, qacc_warmstart): nq + 2 nv values.
  void get_state(double* out) const noexcept;

  /// Sets (qpos, qvel), recomputes the derived quantities (mj_forward) as
  /// v4's set_state does, then sets qpos again (mj_forward renormalizes
  /// quaternions in place) and qacc_warmstart, which mj_forward replaces.
  /// A fatal MuJoCo error sets failed().
  void set_state(const double* in) noexcept;

  /// The names of this instance's trouble counters, in add_counters' order:
  /// mujoco_instability_warnings, mujoco_other_warnings,
  /// mujoco_non_finite_states (trouble_counts' fields).
  static std::vector<std::string> counter_names();

  /// Adds this instance's trouble counts since it was made to out[0..3).
  void add_counters(uint64_t* out) const noexcept {
    out[0] += counts_.instability_warnings;
    out[1] += counts_.other_warnings;
    out[2] += counts_.non_finite_observations;
  }

  /// This instance's trouble counts since it was made (trouble() adds up
  /// every instance's of the process).
  const trouble_counts& counts() const noexcept { return counts_; }

  /// Whether MuJoCo stopped with a fatal error (mju_error: its stack
  /// exhausted, say) in a reset, step or set_state of this instance since
  /// the failure was last taken; the simulation was then reset as
  /// mj_resetData leaves it (see docs/environments.md, "Bad input and trouble").
  bool failed() const noexcept { return !failure_.empty(); }

  /// The failure's message (empty when none), which the instance then forgets.
  std::string take_failure() noexcept { return std::exchange(failure_, std::string()); }

protected:
  /// v4's reset: mj_resetData (done by reset_data), then qpos0 + qpos_noise
  /// and qvel0 + qvel_noise (nq and nv values, drawn by the task), then
  /// mj_forward (whose solution is the first step's warm start, as in v4).
  /// A fatal MuJoCo error sets failed().
  void reset_to(const double* qpos_noise, const double* qvel_noise) noexcept;

  /// v4's do_simulation: `action` (nu values, unclipped: MuJoCo clamps the
  /// control to ctrlrange itself) written to ctrl, frame_skip calls of
  /// mj_step, then mj_rnePostConstraint. Counts MuJoCo's warnings; returns
  /// whether qpos and qvel are finite, counting it when they are not, and
  /// false when MuJoCo failed (failed() is then set).
  /// (MuJoCo itself resets the simulation to qpos0 when a position, velocity
  /// or acceleration is NaN or beyond 1e10 at the start of an mj_step, with
  /// a warning; the finiteness check is the safety net behind it.)
  bool simulate(const float* action) noexcept;

  /// The mutable simulation data.
  mjData& mutable_data() noexcept { return *data_; }

private:
  struct data_deleter {
    void operator()(mjData* d) const noexcept { mj_deleteData(d); }
  };

  model_ptr model_;
  std::unique_ptr<mjData, data_deleter> data_;
  int frame_skip_;
  trouble_counts counts_;
  std::string failure_; // MuJoCo's fatal error not yet taken; empty: none
};

} // namespace troupe::envs::mujoco
