#include "envs/mujoco/mujoco_env.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <mujoco/mjxmacro.h>

#include <fmt/format.h>

#include "envs/mujoco/model_files.hpp"
#include "base/mutex.hpp"

namespace troupe::envs::mujoco {

namespace {

// -- counting, never printing ---------------------------------------------------

std::atomic<uint64_t> instability_warnings{0};
std::atomic<uint64_t> other_warnings{0};
std::atomic<uint64_t> non_finite_observations{0};
std::atomic<uint64_t> compiles{0};

// What troupe's mju_user_error handler throws: MuJoCo's message.
class mujoco_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// MuJoCo 2.2.2's mju_error calls the compiler's thread-local handler while a
// model compiles (mj_loadXML turns it into its error text), else
// mju_user_error, else prints, waits for Enter on stdin and exit(1)s; a
// handler that returns lets MuJoCo go on past an error it does not survive.
// This one throws: libmujoco.so has unwind tables for all of its code
// (.eh_frame), so the exception crosses its C frames, without cleanup, to
// the nearest catch, which run_guarded below puts around every call of a
// task (docs/environments.md, "Bad input and trouble").
[[noreturn]] void throw_mujoco_error(const char* message) {
  throw mujoco_error(message && *message ? message : "no message");
}

// MuJoCo prints its warnings and appends them to MUJOCO_LOG.TXT unless a
// handler is set. The library never prints: each warning is also counted in
// mjData::warning, which simulate() reads, so the warning handler has nothing
// to do. Installed once, where models are loaded or tasks made; handlers the
// embedding program set first are left in place.
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!mju_user_warning)
      mju_user_warning = [](const char*) {};
    if (!mju_user_error)
      mju_user_error = throw_mujoco_error;
  });
}

// Runs `calls` (MuJoCo functions on `d`); when MuJoCo fails among them,
// resets `d` as mj_resetData does (its stack mark included, which the
// unwound frames left taken) and keeps the message in `failure`. Returns
// whether MuJoCo did not fail.
template <class Calls>
bool run_guarded(const mjModel& m, mjData& d, const char* what, std::string& failure,
                 Calls&& calls) noexcept {
  try {
    calls();
    return true;
  } catch (const mujoco_error& x) {
    mj_resetData(&m, &d);
    if (failure.empty())
      failure = fmt::format("MuJoCo error in {}: {} (the simulation was reset to the "
                            "model's initial state)",
                            what, x.what());
    return false;
  }
}

// MuJoCo's XML compiler keeps global state: one compile at a time.
base::mutex& compile_mutex() {
  static base::mutex m;
  return m;
}

struct model_deleter {
  void operator()(const mjModel* m) const noexcept {
    mj_deleteModel(const_cast<mjModel*>(m));
  }
};

// The error buffer MuJoCo writes its message into, without a trailing newline.
std::string mujoco_message(const char* buffer) {
  std::string text = buffer;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text.empty() ? std::string("no message") : text;
}

std::atomic<bool> full_resets{false};

} // namespace

trouble_counts trouble() noexcept {
  return {instability_warnings.load(std::memory_order_relaxed),
          other_warnings.load(std::memory_order_relaxed),
          non_finite_observations.load(std::memory_order_relaxed)};
}

uint64_t models_compiled() noexcept {
  return compiles.load(std::memory_order_relaxed);
}

// -- loading ----------------------------------------------------------------------

result<model_ptr> compile_model(std::string_view xml, const std::string& name) {
  install_handlers();
  // mjVFS holds 2000 file names of 1000 characters: on the heap.
  auto vfs = std::make_unique<mjVFS>();
  mj_defaultVFS(vfs.get());
  // The virtual file's name: MuJoCo looks files up by name without a folder.
  const std::string file_name = "model.xml";
  if (mj_makeEmptyFileVFS(vfs.get(), file_name.c_str(), static_cast<int>(xml.size())) !=
      0)
    return make_error(errc::invalid_argument,
                      "MuJoCo model '{}': cannot hold its {} bytes in a virtual file",
                      name, xml.size());
  const int index = mj_findFileVFS(vfs.get(), file_name.c_str());
  std::memcpy(vfs->filedata[index], xml.data(), xml.size());
  char error[1024] = "";
  mjModel* m = nullptr;
  compiles.fetch_add(1, std::memory_order_relaxed);
  try {
    base::mutex_lock lock(compile_mutex());
    m = mj_loadXML(file_name.c_str(), vfs.get(), error, sizeof error);
  } catch (const mujoco_error& x) {
    // The compiler turns its own errors into `error`; one beside it fails here.
    m = nullptr;
    std::snprintf(error, sizeof error, "%s", x.what());
  }
  mj_deleteVFS(vfs.get());
  if (!m)
    return make_error(errc::invalid_argument, "MuJoCo model '{}' does not compile: {}",
                      name, mujoco_message(error));
  return model_ptr(m, model_deleter{});
}

result<model_ptr> load_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::not_found, "MuJoCo model file '{}' cannot be opened: {}",
                      path, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return make_error(errc::invalid_argument, "MuJoCo model file '{}' cannot be read",
                      path);
  return compile_model(text, path);
}

// The built-in models compiled so far, one per name, shared by every instance.
struct compiled_models {
  base::mutex mutex;
  std::map<std::string, model_ptr> by_name TROUPE_GUARDED_BY(mutex);
};

result<model_ptr> builtin_model(const std::string& name) {
  static compiled_models models;
  base::mutex_lock lock(models.mutex);
  auto& compiled = models.by_name;
  if (auto it = compiled.find(name); it != compiled.end())
    return it->second;
  std::vector<std::string_view> names;
  for (const auto& file : builtin_model_files()) {
    if (file.name != name) {
      names.push_back(file.name);
      continue;
    }
    auto m = compile_model(file.text, fmt::format("envs/mujoco/models/{}", name));
    if (m)
      compiled.emplace(name, *m);
    return m;
  }
  return make_error(errc::not_found, "no built-in MuJoCo model file '{}' (built in: {})",
                    name, fmt::join(names, ", "));
}

// -- helpers for tasks ----------------------------------------------------------------

double standard_normal(rng& r) noexcept {
  for (;;) {
    const double u = r.uniform(-1.0, 1.0), v = r.uniform(-1.0, 1.0);
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0)
      return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

std::vector<std::string>
hinge_and_slide_state_names(const std::vector<std::string>& joints) {
  std::vector<std::string> names;
  for (const char* part : {"qpos", "qvel", "qacc_warmstart"})
    for (const auto& joint : joints)
      names.push_back(fmt::format("{}.{}", part, joint));
  return names;
}

std::vector<std::string> joint_state_names(const std::vector<named_joint>& joints) {
  static const char* const free_positions[] = {"x", "y", "z", "qw", "qx", "qy", "qz"};
  static const char* const free_velocities[] = {"vx", "vy", "vz", "wx", "wy", "wz"};
  // A ball joint's are a free joint's rotational ones.
  const char* const* ball_positions = free_positions + 3;
  const char* const* ball_velocities = free_velocities + 3;
  std::vector<std::string> positions, velocities;
  for (const auto& [joint, type] : joints) {
    switch (type) {
    case mjJNT_FREE:
      for (int k = 0; k < 7; ++k)
        positions.push_back(fmt::format("{}.{}", joint, free_positions[k]));
      for (int k = 0; k < 6; ++k)
        velocities.push_back(fmt::format("{}.{}", joint, free_velocities[k]));
      break;
    case mjJNT_BALL:
      for (int k = 0; k < 4; ++k)
        positions.push_back(fmt::format("{}.{}", joint, ball_positions[k]));
      for (int k = 0; k < 3; ++k)
        velocities.push_back(fmt::format("{}.{}", joint, ball_velocities[k]));
      break;
    default: // hinge, slide
      positions.push_back(joint);
      velocities.push_back(joint);
    }
  }
  std::vector<std::string> names;
  for (const auto& p : positions)
    names.push_back("qpos." + p);
  for (const char* part : {"qvel", "qacc_warmstart"})
    for (const auto& v : velocities)
      names.push_back(fmt::format("{}.{}", part, v));
  return names;
}

std::vector<std::string> joint_state_names(const mjModel& m) {
  std::vector<named_joint> joints;
  for (int j = 0; j < m.njnt; ++j)
    joints.push_back({m.names + m.name_jntadr[j], static_cast<mjtJoint>(m.jnt_type[j])});
  return joint_state_names(joints);
}

// -- reset ------------------------------------------------------------------------

// mj_resetData (MuJoCo 2.2.2, src/engine/engine_io.c) clears the header,
// zeroes the whole buffer (nbuffer bytes, mostly constraint rows sized by
// njmax and nconmax), then sets qpos = qpos0 and the mocap poses; it leaves
// the stack alone. Between two resets MuJoCo writes contact rows only below
// ncon and constraint rows only below nefc, and records the largest of each
// in maxuse_con and maxuse_efc (mj_makeConstraint, after every collision
// and constraint pass). So zeroing every array, the contact and constraint
// ones up to those marks, leaves the buffer as the full memset would: by
// induction from mj_makeData, whose mj_resetData zeroes everything.
void reset_data(const mjModel& m, mjData& d) noexcept {
#if mjVERSION_HEADER == 222
  const bool tracked = m.njmax > 0 && !(m.opt.disableflags & mjDSBL_CONSTRAINT);
#else
  const bool tracked = false;
#endif
  if (!tracked || full_resets.load(std::memory_order_relaxed)) {
    mj_resetData(&m, &d);
    return;
  }
  const int contact_rows = d.maxuse_con, constraint_rows = d.maxuse_efc;
  // The header, as mj_resetData clears it.
  d.pstack = 0;
  d.maxuse_stack = 0;
  d.maxuse_con = 0;
  d.maxuse_efc = 0;
  std::memset(d.warning, 0, sizeof d.warning);
  std::memset(d.timer, 0, sizeof d.timer);
  std::memset(d.solver, 0, sizeof d.solver);
  d.solver_iter = 0;
  d.solver_nnz = 0;
  d.solver_fwdinv[0] = d.solver_fwdinv[1] = 0;
  d.ne = d.nf = d.nefc = d.ncon = 0;
  d.time = 0;
  d.energy[0] = d.energy[1] = 0;
  // Every array of mjxmacro.h's list, rows x columns with these counts: the
  // model's, but the written rows for those sized by nconmax and njmax.
  {
    const size_t nq = m.nq, nv = m.nv, na = m.na, nu = m.nu, nbody = m.nbody,
                 nmocap = m.nmocap, nuserdata = m.nuserdata, nsensordata = m.nsensordata,
                 njnt = m.njnt, ngeom = m.ngeom, nsite = m.nsite, ncam = m.ncam,
                 nlight = m.nlight, ntendon = m.ntendon, nwrap = m.nwrap, nM = m.nM,
                 nD = m.nD;
    const size_t nconmax = static_cast<size_t>(contact_rows);
    const size_t njmax = static_cast<size_t>(constraint_rows);
#define X(type, name, nr, nc) std::memset(d.name, 0, sizeof(type) * (nr) * (nc));
    MJDATA_POINTERS
#undef X
  }
  std::copy(m.qpos0, m.qpos0 + m.nq, d.qpos);
  // Mocap bodies start at their model pose, as in mj_resetData.
  for (int i = 0; i < m.nbody; ++i)
    if (const int id = m.body_mocapid[i]; id >= 0) {
      std::copy(m.body_pos + 3 * i, m.body_pos + 3 * i + 3, d.mocap_pos + 3 * id);
      std::copy(m.body_quat + 4 * i, m.body_quat + 4 * i + 4, d.mocap_quat + 4 * id);
    }
}

void reset_with_mj_resetData(bool on) noexcept {
  full_resets.store(on, std::memory_order_relaxed);
}

// -- the task base ---------------------------------------------------------------------

std::vector<std::string> mujoco_task::counter_names() {
  return {"mujoco_instability_warnings", "mujoco_other_warnings",
          "mujoco_non_finite_states"};
}

namespace {

model_ptr builtin_or_stop(const char* model_file) {
  auto m = builtin_model(model_file);
  TROUPE_CHECK(m.ok(), "a built-in MuJoCo model does not load: {}",
               m ? std::string() : m.err().message);
  return *m;
}

} // namespace

mujoco_task::mujoco_task(const char* model_file, int frame_skip)
  : mujoco_task(builtin_or_stop(model_file), frame_skip) {}

mujoco_task::mujoco_task(model_ptr model, int frame_skip)
  : model_(std::move(model)), frame_skip_(frame_skip) {
  TROUPE_CHECK(model_ != nullptr, "a MuJoCo task needs a model");
  install_handlers();
  // MuJoCo fails (throw_mujoco_error) when it cannot allocate the data: the
  // exception leaves the constructor, and make_env reports it.
  data_.reset(mj_makeData(model_.get()));
  TROUPE_CHECK(data_ != nullptr, "MuJoCo cannot allocate the data of a model");
}

void mujoco_task::get_state(double* out) const noexcept {
  const mjModel& m = *model_;
  const mjData& d = *data_;
  std::copy(d.qpos, d.qpos + m.nq, out);
  std::copy(d.qvel, d.qvel + m.nv, out + m.nq);
  std::copy(d.qacc_warmstart, d.qacc_warmstart + m.nv, out + m.nq + m.nv);
}

void mujoco_task::set_state(const double* in) noexcept {
  const mjModel& m = *model_;
  mjData& d = *data_;
  std::copy(in, in + m.nq, d.qpos);
  std::copy(in + m.nq, in + m.nq + m.nv, d.qvel);
  if (!run_guarded(m, d, "set_state", failure_, [&] { mj_forward(&m, &d); }))
    return;
  // MuJoCo 2.2's mj_forward renormalizes the quaternions of free and ball
  // joints in qpos, changing the last bits of a saved one: qpos is put back
  // as given, so that the next mj_step starts from the saved episode's qpos.
  std::copy(in, in + m.nq, d.qpos);
  // After mj_forward, which leaves its own solution as the warm start: the
  // next mj_step then starts its solver where the saved episode's would have.
  std::copy(in + m.nq + m.nv, in + m.nq + 2 * m.nv, d.qacc_warmstart);
}

void mujoco_task::reset_to(const double* qpos_noise, const double* qvel_noise) noexcept {
  const mjModel& m = *model_;
  mjData& d = *data_;
  reset_data(m, d);
  // v4 adds the noise to init_qpos and init_qvel: the data's qpos and qvel
  // right after mj_makeData, which are qpos0 and zero.
  for (int i = 0; i < m.nq; ++i)
    d.qpos[i] = m.qpos0[i] + qpos_noise[i];
  for (int i = 0; i < m.nv; ++i)
    d.qvel[i] = 0.0 + qvel_noise[i];
  run_guarded(m, d, "reset", failure_, [&] { mj_forward(&m, &d); });
}

bool mujoco_task::simulate(const float* action) noexcept {
  const mjModel& m = *model_;
  mjData& d = *data_;
  for (int i = 0; i < m.nu; ++i)
    d.ctrl[i] = static_cast<double>(action[i]);
  // Counted per step: MuJoCo's own reset after a bad qacc keeps the count.
  std::memset(d.warning, 0, sizeof d.warning);
  const bool ran = run_guarded(m, d, "step", failure_, [&] {
    for (int k = 0; k < frame_skip_; ++k)
      mj_step(&m, &d);
    // Force-related quantities (cacc, cfrc_int, cfrc_ext), which v4's
    // observations of Ant and Humanoid read.
    mj_rnePostConstraint(&m, &d);
  });
  if (!ran)
    return false;
  int instabilities = 0, others = 0;
  for (int w = 0; w < mjNWARNING; ++w) {
    const bool instability =
      w == mjWARN_BADQPOS || w == mjWARN_BADQVEL || w == mjWARN_BADQACC;
    (instability ? instabilities : others) += d.warning[w].number;
  }
  counts_.instability_warnings += static_cast<uint64_t>(instabilities);
  counts_.other_warnings += static_cast<uint64_t>(others);
  if (instabilities)
    instability_warnings.fetch_add(static_cast<uint64_t>(instabilities),
                                   std::memory_order_relaxed);
  if (others)
    other_warnings.fetch_add(static_cast<uint64_t>(others), std::memory_order_relaxed);
  bool finite = true;
  for (int i = 0; i < m.nq; ++i)
    finite &= std::isfinite(d.qpos[i]);
  for (int i = 0; i < m.nv; ++i)
    finite &= std::isfinite(d.qvel[i]);
  if (!finite) {
    counts_.non_finite_observations += 1;
    non_finite_observations.fetch_add(1, std::memory_order_relaxed);
  }
  return finite;
}

} // namespace troupe::envs::mujoco
