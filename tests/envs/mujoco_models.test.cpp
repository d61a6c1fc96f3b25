// The MuJoCo tasks' model files against Gymnasium's: each built-in model file
// compiles to the facts of Gymnasium's v4 model; loading errors name the file
// with MuJoCo's own message.
//
// The reference values were taken on 2026-11-26 by compiling Gymnasium's own
// model files (Farama-Foundation/Gymnasium at 3f0476a8c,
// gymnasium/envs/mujoco/assets/inverted_pendulum.xml and half_cheetah.xml)
// with Debian's MuJoCo 2.2.2 (libmujoco-dev 2.2.2-3) in a throwaway C program
// that printed nq, nv, nu, opt.timestep, opt.integrator, body_mass,
// body_inertia, jnt_limited, jnt_range, actuator_gear[0],
// actuator_ctrllimited and actuator_ctrlrange with %.17g. The same program's
// mj_printModel of both models differed only in names, colors, textures,
// materials, lights and cameras.
//
// Hopper-v4, Walker2d-v4, Swimmer-v4, Reacher-v4 and InvertedDoublePendulum-v4
// (taken the same way on 2026-11-26): v4 was Gymnasium's current version up
// to v0.29.1, and v4's python files load hopper.xml, walker2d.xml,
// swimmer.xml, reacher.xml and inverted_double_pendulum.xml, so the facts are
// those of the assets at tag v0.29.1. Of these, hopper.xml and walker2d.xml
// were rewritten in local coordinates in 7708fa8ab (July 2023, before
// v0.29.1); the rewritten and the earlier global-coordinate files compile to
// bitwise the same model in MuJoCo 2.2.2 (every numeric array of mjModel
// compared with %a; only the lights' directions print -0 against 0).
// swimmer.xml changed after v0.29.1 (16f8faf0b, October 2023, for MuJoCo 3:
// collision="predefined" dropped and contype/conaffinity set to 0): both
// files let nothing touch, but they compile to different models (collision,
// geom_contype, geom_conaffinity), and the facts and troupe's file follow
// v0.29.1's, the one v4 loaded while it was current. reacher.xml and
// inverted_double_pendulum.xml have not changed since the rename to
// gymnasium. For these five models the comparison was also made bitwise:
// every numeric array of mjModel (mjxmacro's MJMODEL_POINTERS) and the
// options, printed with %a, are identical to Gymnasium's but for names and
// visual fields.
//
// Ant-v4 and Humanoid-v4 (taken the same way, 2026-11-26): ant_v4.py loads
// assets/ant.xml and humanoid_v4.py assets/humanoid.xml. Neither file has
// changed since v4 was current: `git log` of each shows only the rename to
// gymnasium and (humanoid.xml) a file-mode change, and both are identical
// at v0.26.0, v0.29.1 and 3f0476a8c, so these are the facts of the models v4
// loads. Our files keep Ant's unused custom numeric "init_qpos" and
// Humanoid's nkey 5 and nuser_geom 1, which the compiled models hold, and
// the printed models then differ only in names, colors, textures,
// materials, lights and cameras (nstack 1322460 and 1370045 alike).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "envs/mujoco/mujoco_env.hpp"
#include "envs/mujoco/model_files.hpp"
#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::envs;

namespace {

struct body_facts {
  const char* name;
  double mass;
  double inertia[3]; // diagonal, in the body's inertial frame
};

struct joint_facts {
  const char* name;
  bool limited;
  double range[2];
};

struct actuator_facts {
  double gear;
  double ctrlrange[2];
};

struct model_facts {
  const char* id;
  const char* file;
  int nq, nv, nu;
  double timestep;
  int integrator; // mjtIntegrator: 0 Euler, 1 RK4
  std::vector<body_facts> bodies;
  std::vector<joint_facts> joints;
  std::vector<actuator_facts> actuators;
  int max_episode_steps = 1000; // Gymnasium's registered time limit
};

// One line per body, joint and actuator.
// clang-format off
const std::vector<model_facts>& gymnasium_facts() {
  static const std::vector<model_facts> facts = {
    {"InvertedPendulum-v4",
     "inverted_pendulum.xml",
     2, 2, 1, 0.02, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"cart", 10.471975511965979,
       {0.12671090369478838, 0.12671090369478838, 0.04817108735504351}},
      {"pole", 5.0185916413633063,
       {0.1887497668730885, 0.1887497668730885, 0.0059064963098460705}}},
     {{"slider", true, {-1, 1}}, {"hinge", true, {-1.5707963267948966, 1.5707963267948966}}},
     {{100, {-3, 3}}}},
    {"HalfCheetah-v4",
     "half_cheetah.xml",
     9, 9, 6, 0.01, mjINT_EULER,
     {{"world", 0, {0, 0, 0}},
      {"torso", 6.2502092050209201,
       {0.89711768811174342, 0.88565545223515785, 0.017960923407966355}},
      {"bthigh", 1.5435146443514645,
       {0.01684433958158996, 0.01684433958158996, 0.0015760215899581589}},
      {"bshin", 1.5874476987447697,
       {0.018267419079497905, 0.018267419079497905, 0.0016225027615062756}},
      {"bfoot", 1.0953974895397491,
       {0.0063524232635983275, 0.0063524232635983275, 0.0011019136401673642}},
      {"fthigh", 1.4380753138075317,
       {0.013739643347280341, 0.013739643347280341, 0.0014644667782426782}},
      {"fshin", 1.2008368200836821,
       {0.0082221086192468609, 0.0082221086192468609, 0.001213468451882845}},
      {"ffoot", 0.8845188284518829,
       {0.0035291094560669458, 0.0035291094560669458, 0.00087880401673640172}}},
     {{"rootx", false, {0, 0}},
      {"rootz", false, {0, 0}},
      {"rooty", false, {0, 0}},
      {"bthigh", true, {-0.52000000000000002, 1.05}},
      {"bshin", true, {-0.78500000000000003, 0.78500000000000003}},
      {"bfoot", true, {-0.40000000000000002, 0.78500000000000003}},
      {"fthigh", true, {-1, 0.69999999999999996}},
      {"fshin", true, {-1.2, 0.87}},
      {"ffoot", true, {-0.5, 0.5}}},
     {{120, {-1, 1}}, {90, {-1, 1}}, {60, {-1, 1}}, {120, {-1, 1}}, {60, {-1, 1}},
      {30, {-1, 1}}}},
    {"Hopper-v4",
     "hopper.xml",
     6, 6, 3, 0.002, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"torso", 3.6651914291880923,
       {0.069245938072875005, 0.069245938072875005, 0.004450589592585541}},
      {"thigh", 4.0578905108868177,
       {0.093298756826921944, 0.093298756826921944, 0.0049414634447089477}},
      {"leg", 2.7813566959781637,
       {0.072302540173209709, 0.072302540173209709, 0.0021821921450855186}},
      {"foot", 5.3155747698739306,
       {0.1035230805900054, 0.1035230805900054, 0.0092423142594488857}}},
     {{"rootx", false, {0, 0}},
      {"rootz", false, {0, 0}},
      {"rooty", false, {0, 0}},
      {"thigh_joint", true, {-2.6179938779914944, 0}},
      {"leg_joint", true, {-2.6179938779914944, 0}},
      {"foot_joint", true, {-0.78539816339744828, 0.78539816339744828}}},
     {{200, {-1, 1}}, {200, {-1, 1}}, {200, {-1, 1}}}},
    {"Walker2d-v4",
     "walker2d.xml",
     9, 9, 6, 0.002, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"torso", 3.6651914291880923,
       {0.069245938072875005, 0.069245938072875005, 0.004450589592585541}},
      {"thigh", 4.0578905108868177,
       {0.093298756826921944, 0.093298756826921944, 0.0049414634447089477}},
      {"leg", 2.7813566959781637,
       {0.072302540173209709, 0.072302540173209709, 0.0021821921450855186}},
      {"foot", 3.1667253948185117,
       {0.023997746634829429, 0.023997746634829429, 0.0053743853843491313}},
      {"thigh_left", 4.0578905108868177,
       {0.093298756826921944, 0.093298756826921944, 0.0049414634447089477}},
      {"leg_left", 2.7813566959781637,
       {0.072302540173209709, 0.072302540173209709, 0.0021821921450855186}},
      {"foot_left", 3.1667253948185117,
       {0.023997746634829429, 0.023997746634829429, 0.0053743853843491313}}},
     {{"rootx", false, {0, 0}},
      {"rootz", false, {0, 0}},
      {"rooty", false, {0, 0}},
      {"thigh_joint", true, {-2.6179938779914944, 0}},
      {"leg_joint", true, {-2.6179938779914944, 0}},
      {"foot_joint", true, {-0.78539816339744828, 0.78539816339744828}},
      {"thigh_left_joint", true, {-2.6179938779914944, 0}},
      {"leg_left_joint", true, {-2.6179938779914944, 0}},
      {"foot_left_joint", true, {-0.78539816339744828, 0.78539816339744828}}},
     {{100, {-1, 1}}, {100, {-1, 1}}, {100, {-1, 1}}, {100, {-1, 1}}, {100, {-1, 1}},
      {100, {-1, 1}}}},
    {"Swimmer-v4",
     "swimmer.xml",
     5, 5, 2, 0.01, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"torso", 35.604716740684324,
       {3.9175660390264717, 3.9175660390264717, 0.17383479349863523}},
      {"mid", 35.604716740684324,
       {3.9175660390264717, 3.9175660390264717, 0.17383479349863523}},
      {"back", 35.604716740684324,
       {3.9175660390264717, 3.9175660390264717, 0.17383479349863523}}},
     {{"slider1", false, {0, 0}},
      {"slider2", false, {0, 0}},
      {"free_body_rot", false, {0, 0}},
      {"motor1_rot", true, {-1.7453292519943295, 1.7453292519943295}},
      {"motor2_rot", true, {-1.7453292519943295, 1.7453292519943295}}},
     {{150, {-1, 1}}, {150, {-1, 1}}}},
    {"Reacher-v4",
     "reacher.xml",
     4, 4, 2, 0.01, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"body0", 0.035604716740684321,
       {3.9175660390264734e-05, 3.9175660390264734e-05, 1.7383479349863525e-06}},
      {"body1", 0.035604716740684321,
       {3.9175660390264734e-05, 3.9175660390264734e-05, 1.7383479349863525e-06}},
      {"fingertip", 0.0041887902047863914,
       {1.6755160819145565e-07, 1.6755160819145565e-07, 1.6755160819145565e-07}},
      {"target", 0.0030536280592892784,
       {9.8937549120972611e-08, 9.8937549120972611e-08, 9.8937549120972611e-08}}},
     {{"joint0", false, {0, 0}},
      {"joint1", true, {-3, 3}},
      {"target_x", true, {-0.27000000000000002, 0.27000000000000002}},
      {"target_y", true, {-0.27000000000000002, 0.27000000000000002}}},
     {{200, {-1, 1}}, {200, {-1, 1}}},
     50},
    {"InvertedDoublePendulum-v4",
     "inverted_double_pendulum.xml",
     3, 3, 1, 0.01, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"cart", 10.471975511965979,
       {0.12671090369478838, 0.12671090369478838, 0.04817108735504351}},
      {"pole", 4.1987385815227585,
       {0.15497066975016235, 0.15497066975016235, 0.0041739278535410321}},
      {"pole2", 4.1987385815227585,
       {0.15497066975016235, 0.15497066975016235, 0.0041739278535410321}}},
     {{"slider", true, {-1, 1}},
      {"hinge", false, {0, 0}},
      {"hinge2", false, {0, 0}}},
     {{500, {-1, 1}}}},
    {"Ant-v4",
     "ant.xml",
     15, 14, 8, 0.01, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"torso", 0.32724923474893675,
       {0.008181230868723419, 0.008181230868723419, 0.008181230868723419}},
      {"front_left_leg", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"aux_1", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"", 0.067592204532680264,
       {0.0026747906600381815, 0.0026747906600381815, 0.00020943214063305483}},
      {"front_right_leg", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"aux_2", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"", 0.067592204532680264,
       {0.0026747906600381815, 0.0026747906600381815, 0.00020943214063305483}},
      {"back_leg", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"aux_3", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"", 0.067592204532680264,
       {0.0026747906600381815, 0.0026747906600381815, 0.00020943214063305483}},
      {"right_back_leg", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"aux_4", 0.039157753728466707,
       {0.00056796608319280013, 0.00056796608319280013, 0.00011844189805957145}},
      {"", 0.067592204532680264,
       {0.0026747906600381815, 0.0026747906600381815, 0.00020943214063305483}}},
     {{"root", false, {0, 0}},
      {"hip_1", true, {-0.52359877559829882, 0.52359877559829882}},
      {"ankle_1", true, {0.52359877559829882, 1.2217304763960306}},
      {"hip_2", true, {-0.52359877559829882, 0.52359877559829882}},
      {"ankle_2", true, {-1.2217304763960306, -0.52359877559829882}},
      {"hip_3", true, {-0.52359877559829882, 0.52359877559829882}},
      {"ankle_3", true, {-1.2217304763960306, -0.52359877559829882}},
      {"hip_4", true, {-0.52359877559829882, 0.52359877559829882}},
      {"ankle_4", true, {0.52359877559829882, 1.2217304763960306}}},
     {{150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}},
      {150, {-1, 1}}}},
    {"Humanoid-v4",
     "humanoid.xml",
     24, 23, 17, 0.0030000000000000001, mjINT_RK4,
     {{"world", 0, {0, 0, 0}},
      {"torso", 8.9074623704782621,
       {0.17324152504522802, 0.1540101405646645, 0.04111915493762297}},
      {"lwaist", 2.2619467105846511,
       {0.0098530398713067395, 0.0098530398713067395, 0.0037457837527281818}},
      {"pelvis", 6.6161941284601031,
       {0.05231797918580651, 0.05231797918580651, 0.024322147492239099}},
      {"right_thigh", 4.7517509288062421,
       {0.074951653865191981, 0.074951653865191981, 0.0082274313455270448}},
      {"right_shin", 2.7556961671836424,
       {0.032608015464339946, 0.032608015464339946, 0.0031898902930933832}},
      {"right_foot", 1.7671458676442586,
       {0.0039760782021995818, 0.0039760782021995818, 0.0039760782021995818}},
      {"left_thigh", 4.7517509288062421,
       {0.074951653865191981, 0.074951653865191981, 0.0082274313455270448}},
      {"left_shin", 2.7556961671836424,
       {0.032608015464339946, 0.032608015464339946, 0.0031898902930933832}},
      {"left_foot", 1.7671458676442586,
       {0.0039760782021995818, 0.0039760782021995818, 0.0039760782021995818}},
      {"right_upper_arm", 1.6610804848382084,
       {0.015905542379591853, 0.015905542379591853, 0.0012859711761735542}},
      {"right_lower_arm", 1.2295401928310803,
       {0.013667228332107482, 0.01366722833210748, 0.00062156108233777946}},
      {"left_upper_arm", 1.6610804848382084,
       {0.015905542379591853, 0.015905542379591853, 0.0012859711761735542}},
      {"left_lower_arm", 1.2295401928310803,
       {0.013667228332107482, 0.01366722833210748, 0.00062156108233777968}}},
     {{"root", false, {0, 0}},
      {"abdomen_z", true, {-0.78539816339744828, 0.78539816339744828}},
      {"abdomen_y", true, {-1.3089969389957472, 0.52359877559829882}},
      {"abdomen_x", true, {-0.6108652381980153, 0.6108652381980153}},
      {"right_hip_x", true, {-0.43633231299858238, 0.087266462599716474}},
      {"right_hip_z", true, {-1.0471975511965976, 0.6108652381980153}},
      {"right_hip_y", true, {-1.9198621771937625, 0.3490658503988659}},
      {"right_knee", true, {-2.7925268031909272, -0.034906585039886591}},
      {"left_hip_x", true, {-0.43633231299858238, 0.087266462599716474}},
      {"left_hip_z", true, {-1.0471975511965976, 0.6108652381980153}},
      {"left_hip_y", true, {-1.9198621771937625, 0.3490658503988659}},
      {"left_knee", true, {-2.7925268031909272, -0.034906585039886591}},
      {"right_shoulder1", true, {-1.4835298641951802, 1.0471975511965976}},
      {"right_shoulder2", true, {-1.4835298641951802, 1.0471975511965976}},
      {"right_elbow", true, {-1.5707963267948966, 0.87266462599716477}},
      {"left_shoulder1", true, {-1.0471975511965976, 1.4835298641951802}},
      {"left_shoulder2", true, {-1.0471975511965976, 1.4835298641951802}},
      {"left_elbow", true, {-1.5707963267948966, 0.87266462599716477}}},
     {{100, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {300, {-0.40000000000000002, 0.40000000000000002}},
      {200, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {100, {-0.40000000000000002, 0.40000000000000002}},
      {300, {-0.40000000000000002, 0.40000000000000002}},
      {200, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}},
      {25, {-0.40000000000000002, 0.40000000000000002}}}},
  };
  return facts;
}
// clang-format on

// Equal up to the last bits: the values above are printed with 17 digits.
bool same(double got, double want) {
  return std::fabs(got - want) <= 1e-14 * std::fabs(want);
}

} // namespace

TEST_CASE("every MuJoCo task's model file compiles to Gymnasium's v4 model") {
  REQUIRE(gymnasium_facts().size() == mujoco::task_registrations().size());
  for (const auto& want : gymnasium_facts()) {
    CAPTURE(want.id);
    auto compiled = mujoco::builtin_model(want.file);
    REQUIRE(compiled);
    const mjModel& m = **compiled;
    CHECK(m.nq == want.nq);
    CHECK(m.nv == want.nv);
    CHECK(m.nu == want.nu);
    CHECK(m.opt.timestep == want.timestep);
    CHECK(m.opt.integrator == want.integrator);
    REQUIRE(m.nbody == static_cast<int>(want.bodies.size()));
    for (int b = 0; b < m.nbody; ++b) {
      const auto& body = want.bodies[static_cast<size_t>(b)];
      CAPTURE(body.name);
      CHECK(std::string(m.names + m.name_bodyadr[b]) == body.name);
      CHECK(same(m.body_mass[b], body.mass));
      for (int k = 0; k < 3; ++k)
        CHECK(same(m.body_inertia[3 * b + k], body.inertia[k]));
    }
    REQUIRE(m.njnt == static_cast<int>(want.joints.size()));
    for (int j = 0; j < m.njnt; ++j) {
      const auto& joint = want.joints[static_cast<size_t>(j)];
      CAPTURE(joint.name);
      CHECK(std::string(m.names + m.name_jntadr[j]) == joint.name);
      CHECK(static_cast<bool>(m.jnt_limited[j]) == joint.limited);
      CHECK(same(m.jnt_range[2 * j], joint.range[0]));
      CHECK(same(m.jnt_range[2 * j + 1], joint.range[1]));
    }
    REQUIRE(m.nu == static_cast<int>(want.actuators.size()));
    for (int a = 0; a < m.nu; ++a) {
      const auto& actuator = want.actuators[static_cast<size_t>(a)];
      CAPTURE(a);
      CHECK(m.actuator_gear[6 * a] == actuator.gear);
      CHECK(m.actuator_ctrllimited[a] == 1);
      CHECK(m.actuator_ctrlrange[2 * a] == actuator.ctrlrange[0]);
      CHECK(m.actuator_ctrlrange[2 * a + 1] == actuator.ctrlrange[1]);
    }
  }
}

TEST_CASE("each MuJoCo task's spec agrees with its compiled model") {
  for (const auto& want : gymnasium_facts()) {
    CAPTURE(want.id);
    const mjModel& m = *mujoco::builtin_model(want.file).value();
    auto spec = find_spec(want.id).value();
    // Time limits as Gymnasium registers them (Reacher-v4's is 50).
    CHECK(spec->max_episode_steps == want.max_episode_steps);
    // The state: qpos, qvel and the solver's warm start, named by joint (a
    // task may append what v4 reads from the last step's final pass of the
    // dynamics: Reacher and InvertedDoublePendulum, tests/envs/mujoco_tasks.test.cpp).
    REQUIRE(spec->state_dim() >= static_cast<size_t>(m.nq + 2 * m.nv));
    for (int j = 0; j < m.njnt; ++j)
      CHECK(spec->state_names[static_cast<size_t>(m.jnt_qposadr[j])].rfind(
              std::string("qpos.") + (m.names + m.name_jntadr[j]), 0) == 0);
    // The tasks list their joints by hand (no model compiled to register
    // them): the names are the compiled model's, one for one.
    const auto from_model = mujoco::joint_state_names(m);
    const std::vector<std::string> from_spec(
      spec->state_names.begin(),
      spec->state_names.begin() + static_cast<std::ptrdiff_t>(from_model.size()));
    CHECK(from_spec == from_model);
    // The action space is the actuators' ctrlrange, as v4's _set_action_space makes it.
    const auto& actions = spec->action_space;
    REQUIRE(actions.kind == space_kind::box);
    REQUIRE(actions.size() == static_cast<size_t>(m.nu));
    for (int a = 0; a < m.nu; ++a) {
      CHECK(actions.low[static_cast<size_t>(a)] ==
            static_cast<float>(m.actuator_ctrlrange[2 * a]));
      CHECK(actions.high[static_cast<size_t>(a)] ==
            static_cast<float>(m.actuator_ctrlrange[2 * a + 1]));
    }
  }
}

TEST_CASE(
  "state names give a free joint 7 positions and 6 velocities and a ball 4 and 3") {
  const std::vector<std::string> ant_names = {
    "qpos.root.x",  "qpos.root.y",  "qpos.root.z",  "qpos.root.qw", "qpos.root.qx",
    "qpos.root.qy", "qpos.root.qz", "qpos.hip_1",   "qpos.ankle_1", "qpos.hip_2",
    "qpos.ankle_2", "qpos.hip_3",   "qpos.ankle_3", "qpos.hip_4",   "qpos.ankle_4"};
  const auto& spec = *find_spec("Ant-v4").value();
  REQUIRE(spec.state_names.size() == 15 + 2 * 14 + 2);
  for (size_t i = 0; i < ant_names.size(); ++i)
    CHECK(spec.state_names[i] == ant_names[i]);
  CHECK(spec.state_names[15] == "qvel.root.vx");
  CHECK(spec.state_names[20] == "qvel.root.wz");
  CHECK(spec.state_names[21] == "qvel.hip_1");
  CHECK(spec.state_names[29] == "qacc_warmstart.root.vx");
  CHECK(spec.state_names[42] == "qacc_warmstart.ankle_4");
  // Then the torso's position, which the next step's reward starts from.
  CHECK(spec.state_names[43] == "x_position");
  CHECK(spec.state_names[44] == "y_position");

  // Humanoid: its joints, the mass centre's position, then the observed
  // arrays of 14 bodies and 23 degrees of freedom.
  const auto& humanoid = find_spec("Humanoid-v4").value()->state_names;
  REQUIRE(humanoid.size() == 24 + 2 * 23 + 2 + 140 + 84 + 23 + 84);
  CHECK(humanoid[0] == "qpos.root.x");
  CHECK(humanoid[7] == "qpos.abdomen_z");
  CHECK(humanoid[24] == "qvel.root.vx");
  CHECK(humanoid[70] == "x_position");
  CHECK(humanoid[71] == "y_position");
  CHECK(humanoid[72] == "cinert.world.0");
  CHECK(humanoid[72 + 10] == "cinert.torso.0");
  CHECK(humanoid[72 + 140] == "cvel.world.0");
  CHECK(humanoid[72 + 224] == "qfrc_actuator.root.vx");
  CHECK(humanoid[72 + 224 + 6] == "qfrc_actuator.abdomen_z");
  CHECK(humanoid[72 + 247] == "cfrc_ext.world.0");
  CHECK(humanoid.back() == "cfrc_ext.left_lower_arm.5");
  // Its body names, listed by hand, are the compiled model's.
  const mjModel& humanoid_model = *mujoco::builtin_model("humanoid.xml").value();
  REQUIRE(humanoid_model.nbody == 14);
  for (int b = 0; b < humanoid_model.nbody; ++b) {
    const std::string body = humanoid_model.names + humanoid_model.name_bodyadr[b];
    CAPTURE(body);
    CHECK(humanoid[static_cast<size_t>(72 + 10 * b)] == "cinert." + body + ".0");
    CHECK(humanoid[static_cast<size_t>(72 + 140 + 6 * b)] == "cvel." + body + ".0");
    CHECK(humanoid[static_cast<size_t>(72 + 247 + 6 * b + 5)] ==
          "cfrc_ext." + body + ".5");
  }

  auto ball = mujoco::compile_model(
    "<mujoco><worldbody><body><joint name=\"neck\" type=\"ball\"/><geom size=\".1\"/>"
    "<body pos=\"0 0 -.3\"><joint name=\"knee\" type=\"hinge\"/><geom size=\".1\"/>"
    "</body></body></worldbody></mujoco>",
    "ball test");
  REQUIRE(ball);
  const std::vector<std::string> ball_names = {"qpos.neck.qw",
                                               "qpos.neck.qx",
                                               "qpos.neck.qy",
                                               "qpos.neck.qz",
                                               "qpos.knee",
                                               "qvel.neck.wx",
                                               "qvel.neck.wy",
                                               "qvel.neck.wz",
                                               "qvel.knee",
                                               "qacc_warmstart.neck.wx",
                                               "qacc_warmstart.neck.wy",
                                               "qacc_warmstart.neck.wz",
                                               "qacc_warmstart.knee"};
  CHECK(mujoco::joint_state_names(**ball) == ball_names);

  // Hinges and slides alone: the names the existing tasks give by hand.
  const mjModel& cheetah = *mujoco::builtin_model("half_cheetah.xml").value();
  CHECK(mujoco::joint_state_names(cheetah) ==
        find_spec("HalfCheetah-v4").value()->state_names);
}

TEST_CASE("every built-in model file is one of a registered task and compiles") {
  for (const auto& file : mujoco::builtin_model_files()) {
    std::string name(file.name);
    CAPTURE(name);
    CHECK(mujoco::builtin_model(name));
    bool used = false;
    for (const auto& want : gymnasium_facts())
      used |= name == want.file;
    CHECK(used);
  }
}

TEST_CASE("a missing MuJoCo model file is an error naming the path") {
  test::temp_folder dir("mujoco-model");
  const std::string path = (dir.path / "no_such_model.xml").string();
  auto m = mujoco::load_model_file(path);
  REQUIRE_FALSE(m);
  CHECK(m.err().code == errc::not_found);
  CHECK(m.err().message.find(path) != std::string::npos);
  auto builtin = mujoco::builtin_model("no_such_model.xml");
  REQUIRE_FALSE(builtin);
  CHECK(builtin.err().code == errc::not_found);
  CHECK(builtin.err().message.find("no_such_model.xml") != std::string::npos);
  CHECK(builtin.err().message.find("half_cheetah.xml") !=
        std::string::npos); // the valid ones
}

TEST_CASE("a malformed MuJoCo model file is an error naming it with MuJoCo's message") {
  test::temp_folder dir("mujoco-model");
  SUBCASE("not XML") {
    const std::string path = dir.write("broken.xml", "<mujoco><worldbody><body>");
    auto m = mujoco::load_model_file(path);
    REQUIRE_FALSE(m);
    CHECK(m.err().code == errc::invalid_argument);
    CHECK(m.err().message.find(path) != std::string::npos);
    CHECK(m.err().message.find("XML") != std::string::npos); // MuJoCo's "XML parse error"
  }
  SUBCASE("XML that MuJoCo refuses") {
    const std::string path = dir.write(
      "bad_joint.xml",
      "<mujoco><worldbody><body><joint type=\"twisty\"/><geom size=\"1\"/></body>"
      "</worldbody></mujoco>");
    auto m = mujoco::load_model_file(path);
    REQUIRE_FALSE(m);
    CHECK(m.err().code == errc::invalid_argument);
    CHECK(m.err().message.find(path) != std::string::npos);
    CHECK(m.err().message.find("twisty") != std::string::npos);
  }
  SUBCASE("a good file loads") {
    const std::string path = dir.write(
      "ball.xml", "<mujoco><worldbody><body><freejoint/><geom size=\"0.1\"/></body>"
                  "</worldbody></mujoco>");
    auto m = mujoco::load_model_file(path);
    REQUIRE(m);
    CHECK((*m)->nq == 7);
  }
}
