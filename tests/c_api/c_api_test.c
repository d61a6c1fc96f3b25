/* The C API from C (C99): ABI check, bad config, an environment registered
 * with a function table trained by a session, the resulting policy loaded
 * and acting, and every error path of those calls (wrong length, NaN,
 * closed handle, NULL pointers), and the log callback hearing the session's
 * lines. Exits 0 when every check holds, 1 otherwise;
 * each failed check prints its line and the library's message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <troupe/troupe.h>

static int failures = 0;

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      ++failures;                                                                        \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__,  \
              #cond, troupe_last_error());                                               \
    }                                                                                    \
  } while (0)

/* The message of the last call contains `part`. */
#define CHECK_MESSAGE(part) CHECK(strstr(troupe_last_error(), (part)) != NULL)

/* -- a walker on a line, as a function table ---------------------------------- */

typedef struct walk_context {
  int made;
  int destroyed;
  long steps;
  long resets;
  float goal;
} walk_context;

typedef struct walk {
  float x;
} walk;

static void* walk_create(void* user_data) {
  walk_context* c = (walk_context*)user_data;
  walk* w = (walk*)calloc(1, sizeof(walk));
  ++c->made;
  return w;
}

static void walk_destroy(void* instance, void* user_data) {
  walk_context* c = (walk_context*)user_data;
  ++c->destroyed;
  free(instance);
}

static void walk_reset(void* instance, void* user_data, uint64_t seed, float* obs) {
  walk* w = (walk*)instance;
  walk_context* c = (walk_context*)user_data;
  ++c->resets;
  w->x = (float)(seed % 3) - 1.0f;
  obs[0] = w->x;
  obs[1] = c->goal;
}

static int walk_step(void* instance, void* user_data, const float* action, float* obs,
                     double* reward, int* terminated, int* truncated) {
  walk* w = (walk*)instance;
  walk_context* c = (walk_context*)user_data;
  ++c->steps;
  w->x += action[0] > 0.5f ? 1.0f : -1.0f;
  obs[0] = w->x;
  obs[1] = c->goal;
  *terminated = w->x >= c->goal;
  *truncated = 0;
  *reward = *terminated ? 1.0 : 0.0;
  return 0;
}

static const float obs_low[2] = {-100.0f, -100.0f};
static const float obs_high[2] = {100.0f, 100.0f};

static troupe_env_description walk_description(const char* id) {
  troupe_env_description d;
  memset(&d, 0, sizeof d);
  d.id = id;
  d.obs_dim = 2;
  d.obs_low = obs_low;
  d.obs_high = obs_high;
  d.num_actions = 2;
  d.max_episode_steps = 20;
  return d;
}

/* -- the checks ----------------------------------------------------------------- */

static void abi_and_names(void) {
  troupe_session* s = (troupe_session*)0x1;
  troupe_policy* p = (troupe_policy*)0x1;
  CHECK(troupe_abi_version() == TROUPE_ABI_VERSION);
  CHECK(strlen(troupe_version()) > 0);
  CHECK(strcmp(troupe_status_name(TROUPE_BAD_CONFIG), "bad_config") == 0);
  CHECK(strcmp(troupe_status_name(TROUPE_OK), "ok") == 0);
  CHECK(strcmp(troupe_status_name(TROUPE_UNAVAILABLE), "unavailable") == 0);
  CHECK(strcmp(troupe_status_name((troupe_status)(TROUPE_UNAVAILABLE + 1)), "unknown") ==
        0);
  CHECK(strcmp(troupe_status_name(TROUPE_UNSUPPORTED_VERSION), "unsupported_version") ==
        0);

  CHECK(troupe_session_open_toml(TROUPE_ABI_VERSION + 7, "", "x.toml", NULL, 0, &s) ==
        TROUPE_UNSUPPORTED_VERSION);
  CHECK(s == NULL);
  CHECK_MESSAGE("troupe_session_open_toml");
  {
    char caller[64], library[64];
    snprintf(caller, sizeof caller, "ABI version %d", TROUPE_ABI_VERSION + 7);
    snprintf(library, sizeof library, "ABI version %d", TROUPE_ABI_VERSION);
    CHECK_MESSAGE(caller);
    CHECK_MESSAGE(library);
  }
  CHECK(troupe_policy_load(0, "anything", &p) == TROUPE_UNSUPPORTED_VERSION);
  CHECK_MESSAGE("troupe_policy_load");
  CHECK_MESSAGE("ABI version 0");
  {
    char small[8];
    size_t full = troupe_last_error_copy(small, sizeof small);
    CHECK(full == strlen(troupe_last_error()));
    CHECK(strlen(small) == 7);
    CHECK(strncmp(small, troupe_last_error(), 7) == 0);
  }
}

static void bad_config(void) {
  troupe_session* s = NULL;
  const char* text = "[run]\nseed = 1\n\n[algo]\nlearning_rate = -3.0\n";
  const char* overrides[] = {"algo.gamma=7"};
  CHECK(troupe_session_open_toml(TROUPE_ABI_VERSION, text, "game.toml", NULL, 0, &s) ==
        TROUPE_BAD_CONFIG);
  CHECK(s == NULL);
  CHECK_MESSAGE("game.toml:5");
  CHECK_MESSAGE("algo.learning_rate");
  CHECK(troupe_session_open_toml(TROUPE_ABI_VERSION, "[run]\nseed = 1\n", "ok.toml",
                                 overrides, 1, &s) == TROUPE_BAD_CONFIG);
  CHECK_MESSAGE("algo.gamma");
  /* A missing file is not_found (the header's code for a file that does not
   * exist), not io_error; a folder in its place is not a config file either. */
  CHECK(troupe_session_open(TROUPE_ABI_VERSION, "/nonexistent/troupe/c.toml", NULL, 0,
                            &s) == TROUPE_NOT_FOUND);
  CHECK(s == NULL);
  CHECK_MESSAGE("/nonexistent/troupe/c.toml: no such config file");
  CHECK(troupe_session_open(TROUPE_ABI_VERSION, "/", NULL, 0, &s) == TROUPE_NOT_FOUND);
  CHECK_MESSAGE("/: is a folder");
  CHECK(troupe_session_open(TROUPE_ABI_VERSION, NULL, NULL, 0, &s) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("config_path is NULL");
  CHECK(troupe_session_open(TROUPE_ABI_VERSION, "x.toml", NULL, 0, NULL) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("out is NULL");
}

static void null_handles(void) {
  troupe_progress progress;
  troupe_policy_info info;
  float obs[2] = {0, 0}, action[2];
  int finished = 0;
  CHECK(troupe_session_start(NULL) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_session_start: session is NULL");
  CHECK(troupe_session_progress(NULL, &progress) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_session_wait(NULL, 0, &finished) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_session_close(NULL, &progress) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_policy_act(NULL, obs, 2, action, 2, 1, 0) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_policy_act: policy is NULL");
  CHECK(troupe_policy_info_get(NULL, &info) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_agent_act(NULL, 0, obs, 2, action, 2) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, NULL, NULL, NULL) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("description is NULL");
  CHECK(troupe_environment_ids(NULL, 0, NULL) == TROUPE_INVALID_ARGUMENT);
  /* The free functions take NULL. */
  troupe_session_free(NULL);
  troupe_policy_free(NULL);
  troupe_agent_free(NULL);
}

/* Registers the walker under a fresh id, checks it is listed, trains it for a
 * few updates and returns the run folder in run_dir. */
/* -- the log callback ------------------------------------------------------------ */

/* What the callback heard (calls are serialized by the library). */
typedef struct heard_log {
  int lines[5];   /* by level */
  int bad_level;  /* a level outside troupe_log_level */
  int run_folder; /* "troupe: run folder ..." at TROUPE_LOG_INFO */
  int rows;       /* "steps ..." at TROUPE_LOG_INFO */
} heard_log;

static void hear(int level, const char* message, void* user) {
  heard_log* h = (heard_log*)user;
  if (level < TROUPE_LOG_PROGRESS || level > TROUPE_LOG_ERROR) {
    ++h->bad_level;
    return;
  }
  ++h->lines[level];
  if (level == TROUPE_LOG_INFO && strncmp(message, "troupe: run folder ", 19) == 0)
    ++h->run_folder;
  if (level == TROUPE_LOG_INFO && strncmp(message, "steps ", 6) == 0)
    ++h->rows;
}

static int train_walker(walk_context* context, char* id, size_t id_size, char* run_dir,
                        size_t run_dir_size) {
  troupe_env_functions fns;
  troupe_env_description d;
  troupe_session* s = NULL;
  troupe_progress progress;
  char ids[4096], toml[2048], output_dir[512];
  size_t needed = 0;
  int finished = 0, rounds;
  const char* tmp = getenv("TMPDIR");
  heard_log heard;
  memset(&heard, 0, sizeof heard);

  snprintf(id, id_size, "CWalk%ld-v0", (long)time(NULL) % 100000);
  snprintf(output_dir, sizeof output_dir, "%s/troupe-c-api-%s", tmp ? tmp : "/tmp", id);
  fns.create = walk_create;
  fns.destroy = walk_destroy;
  fns.reset = walk_reset;
  fns.step = walk_step;

  d = walk_description(id);
  fns.step = NULL;
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, &d, &fns, context) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("functions->step is NULL");
  fns.step = walk_step;
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION - 1, &d, &fns, context) ==
        TROUPE_UNSUPPORTED_VERSION);
  d.obs_low = NULL;
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, &d, &fns, context) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("obs_low NULL");
  d.obs_low = obs_low;
  /* num_actions is a count (size_t, as troupe_policy_info's): "-1" is the
   * largest count, refused by the range check. */
  d.num_actions = 0;
  d.num_actions -= 1;
  CHECK(d.num_actions > 0);
  CHECK(sizeof d.num_actions == sizeof(size_t));
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, &d, &fns, context) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("num_actions must be in [1, 16777216]");
  d.num_actions = 2;
  if (troupe_register_environment(TROUPE_ABI_VERSION, &d, &fns, context) != TROUPE_OK) {
    CHECK(!"registering the walker");
    return 0;
  }
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, &d, &fns, context) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("already registered");

  CHECK(troupe_environment_ids(ids, 4, &needed) == TROUPE_INVALID_ARGUMENT);
  CHECK(needed > 4);
  CHECK(troupe_environment_ids(ids, sizeof ids, &needed) == TROUPE_OK);
  CHECK(strstr(ids, "CartPole-v1\n") == ids);
  CHECK(strstr(ids, id) != NULL);
  CHECK(needed == strlen(ids) + 1);

  snprintf(
    toml, sizeof toml,
    "[run]\nname = \"cwalk\"\nseed = 5\noutput_dir = \"%s\"\nlog_every_updates = 2\n"
    "[env]\nid = \"%s\"\nnum_envs = 2\n"
    "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 1024\n"
    "num_steps = 64\n",
    output_dir, id);
  /* The session's lines go to the process-wide callback. */
  troupe_set_log_callback(hear, &heard);
  if (troupe_session_open_toml(TROUPE_ABI_VERSION, toml, "cwalk.toml", NULL, 0, &s) !=
      TROUPE_OK) {
    CHECK(!"opening the session");
    return 0;
  }
  CHECK(troupe_session_progress(s, &progress) == TROUPE_OK);
  CHECK(progress.running == 0 && progress.finished == 0);
  CHECK(troupe_session_start(s) == TROUPE_OK);
  CHECK(troupe_session_start(s) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("already started");
  /* Bounded: 60 rounds of 5 s for a 1024-step run on a loaded machine. */
  for (rounds = 0; rounds < 60 && !finished; ++rounds)
    CHECK(troupe_session_wait(s, 5000, &finished) == TROUPE_OK);
  CHECK(finished == 1);
  if (!finished)
    fprintf(stderr, "training did not end within 300 s\n");
  if (troupe_session_run_dir(s, run_dir, run_dir_size) != TROUPE_OK)
    CHECK(!"reading the run folder");
  CHECK(strstr(run_dir, output_dir) == run_dir);
  CHECK(troupe_session_close(s, &progress) == TROUPE_OK);
  troupe_set_log_callback(NULL, NULL);
  CHECK(heard.bad_level == 0);
  CHECK(heard.run_folder == 1);
  CHECK(heard.rows >= 2);
  CHECK(heard.lines[TROUPE_LOG_PROGRESS] == 0); /* rows, not a progress line */
  CHECK(heard.lines[TROUPE_LOG_ERROR] == 0);
  CHECK(progress.finished == 1);
  CHECK(progress.env_steps >= 1024);
  /* Every step training counted stepped the game or reset it (next-step autoreset). */
  CHECK(context->steps > 0);
  CHECK((uint64_t)(context->steps + context->resets) >= progress.env_steps);
  CHECK(context->made >= 2);
  CHECK(troupe_session_close(s, &progress) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_session_close: the session handle is closed");
  troupe_session_free(s);
  return 1;
}

static void policy_calls(const char* run_dir) {
  troupe_policy* p = NULL;
  troupe_policy_info info;
  float obs[3] = {0.0f, 2.0f, 0.0f};
  float action[2] = {-5.0f, -5.0f};
  char path[600];
  int i;

  CHECK(troupe_policy_load(TROUPE_ABI_VERSION, "/nonexistent/troupe/policy", &p) ==
        TROUPE_NOT_FOUND);
  CHECK(p == NULL);
  CHECK_MESSAGE("/nonexistent/troupe/policy");
  CHECK(troupe_policy_load(TROUPE_ABI_VERSION, NULL, &p) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("path is NULL");

  if (troupe_policy_load(TROUPE_ABI_VERSION, run_dir, &p) != TROUPE_OK) {
    CHECK(!"loading the trained policy");
    return;
  }
  CHECK(troupe_policy_info_get(p, &info) == TROUPE_OK);
  CHECK(info.obs_dim == 2);
  CHECK(info.action_dim == 1);
  CHECK(info.num_actions == 2);
  CHECK(info.discrete == 1);
  for (i = -3; i <= 3; ++i) {
    obs[0] = (float)i;
    CHECK(troupe_policy_act(p, obs, 2, action, 1, 1, 0) == TROUPE_OK);
    CHECK(action[0] == 0.0f || action[0] == 1.0f);
    CHECK(troupe_policy_act(p, obs, 2, action, 1, 0, (uint64_t)i + 100) == TROUPE_OK);
    CHECK(action[0] == 0.0f || action[0] == 1.0f);
  }

  action[0] = -5.0f;
  CHECK(troupe_policy_act(p, obs, 3, action, 1, 1, 0) == TROUPE_DIMENSION_MISMATCH);
  CHECK_MESSAGE("troupe_policy_act");
  CHECK_MESSAGE("has 3 values");
  CHECK_MESSAGE("obs_dim = 2");
  CHECK(action[0] == -5.0f);
  CHECK(troupe_policy_act(p, obs, 2, action, 0, 1, 0) == TROUPE_DIMENSION_MISMATCH);
  CHECK_MESSAGE("action buffer holds 0 values");
  obs[1] = nanf("");
  CHECK(troupe_policy_act(p, obs, 2, action, 1, 1, 0) == TROUPE_NON_FINITE);
  CHECK_MESSAGE("troupe_policy_act: observation value 1 is nan");
  obs[1] = 2.0f;
  CHECK(troupe_policy_act(p, NULL, 2, action, 1, 1, 0) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("obs is NULL");
  CHECK(troupe_policy_info_get(p, NULL) == TROUPE_INVALID_ARGUMENT);
  /* Still working after every error. */
  CHECK(troupe_policy_act(p, obs, 2, action, 1, 1, 0) == TROUPE_OK);

  CHECK(troupe_policy_close(p) == TROUPE_OK);
  CHECK(troupe_policy_act(p, obs, 2, action, 1, 1, 0) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_policy_act: the policy handle is closed");
  CHECK(troupe_policy_close(p) == TROUPE_INVALID_ARGUMENT);
  troupe_policy_free(p);

  /* A checkpoint folder loads too. */
  snprintf(path, sizeof path, "%s/checkpoints", run_dir);
  p = NULL;
  CHECK(troupe_policy_load(TROUPE_ABI_VERSION, path, &p) == TROUPE_NOT_FOUND);
  troupe_policy_free(p);
}

/* The agent of a session not yet started answers with errors, never a
 * crash; the session's stop and checkpoint calls need a started session;
 * built-in environments cannot be unregistered. */
static void agent_before_start(void) {
  troupe_session* s = NULL;
  troupe_agent* a = NULL;
  size_t slots = 0, obs_dim = 0, action_dim = 0;
  float obs[4] = {0, 0, 0, 0}, action = 0;
  float batch_obs[8] = {0, 0, 0, 0, 0, 0, 0, 0}, batch_actions[2] = {0, 0};
  char buf[256];
  if (troupe_session_open_toml(TROUPE_ABI_VERSION, "[env]\nid = \"CartPole-v1\"\n",
                               "game.toml", NULL, 0, &s) != TROUPE_OK) {
    CHECK(!"opening a CartPole session");
    return;
  }
  CHECK(troupe_session_make_agent(s, 4, NULL, &a) == TROUPE_OK);
  CHECK(a != NULL);
  CHECK(troupe_agent_info(a, &slots, &obs_dim, &action_dim) == TROUPE_OK);
  CHECK(slots == 4 && obs_dim == 4 && action_dim == 1);
  CHECK(troupe_agent_act(a, 0, obs, 4, &action, 1) == TROUPE_UNAVAILABLE);
  CHECK_MESSAGE("has not started");
  CHECK(troupe_agent_act(a, 0, obs, 3, &action, 1) == TROUPE_DIMENSION_MISMATCH);
  CHECK_MESSAGE("obs_dim = 4");

  /* Report flags are 0 or 1: another value is refused, naming the flag and
   * the value; both set is accepted (terminated wins), so this one gets as
   * far as the agent, which has not started. */
  CHECK(troupe_agent_report(a, 0, 1.0, 7, 0, NULL) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_agent_report: slot 0: terminated must be 0 or 1, got 7");
  CHECK(troupe_agent_report(a, 1, 1.0, 0, -1, NULL) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_agent_report: slot 1: truncated must be 0 or 1, got -1");
  CHECK(troupe_agent_report(a, 0, 1.0, 1, 1, NULL) == TROUPE_UNAVAILABLE);
  CHECK_MESSAGE("has not started");

  /* act_batch checks its buffers' sizes: count * obs_dim observation values,
   * room for count * action_dim actions. */
  CHECK(troupe_agent_act_batch(a, 1, 2, batch_obs, 7, batch_actions, 2) ==
        TROUPE_DIMENSION_MISMATCH);
  CHECK_MESSAGE("troupe_agent_act_batch: slots [1, 3): the observations hold 7 values; "
                "count * obs_dim = 2 * 4 = 8 are needed");
  CHECK(troupe_agent_act_batch(a, 1, 2, batch_obs, 8, batch_actions, 1) ==
        TROUPE_DIMENSION_MISMATCH);
  CHECK_MESSAGE("the action buffer holds 1 values; the agent writes count * action_dim = "
                "2 * 1 = 2");
  CHECK(troupe_agent_act_batch(a, 0, 5, batch_obs, 20, batch_actions, 5) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("count must be at most the agent's 4 slots, got 5");
  CHECK(troupe_agent_act_batch(a, 1, 2, NULL, 8, batch_actions, 2) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("obs is NULL");
  CHECK(troupe_agent_act_batch(a, 1, 2, batch_obs, 8, batch_actions, 2) ==
        TROUPE_UNAVAILABLE);
  CHECK_MESSAGE("troupe_agent_act_batch: the agent's session has not started");
  CHECK(troupe_session_request_stop(s) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("not started");
  CHECK(troupe_session_save_checkpoint(s, buf, sizeof buf) == TROUPE_INVALID_ARGUMENT);
  CHECK(troupe_unregister_environment("CartPole-v1") != TROUPE_OK);
  CHECK_MESSAGE("CartPole-v1");
  troupe_agent_free(a);
  troupe_session_free(s);
}

/* An environment the game steps itself registers its spaces only; a session
 * over it trains with an agent and refuses to start without one. */
static void spaces_only(void) {
  troupe_env_description d;
  troupe_session* s = NULL;
  troupe_agent* a = NULL;
  troupe_progress progress;
  char id[64], toml[1024], output_dir[512];
  float obs[2] = {0.0f, 2.0f}, action = -1.0f;
  const float inverted[2] = {500.0f, -100.0f};
  const char* tmp = getenv("TMPDIR");

  snprintf(id, sizeof id, "CSpaces%ld-v0", (long)time(NULL) % 100000);
  snprintf(output_dir, sizeof output_dir, "%s/troupe-c-api-%s", tmp ? tmp : "/tmp", id);
  d = walk_description(id);
  CHECK(troupe_register_environment(TROUPE_ABI_VERSION, &d, NULL, NULL) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("functions is NULL");
  CHECK_MESSAGE("troupe_register_environment_spaces");
  CHECK(troupe_register_environment_spaces(TROUPE_ABI_VERSION - 1, &d) ==
        TROUPE_UNSUPPORTED_VERSION);
  CHECK(troupe_register_environment_spaces(TROUPE_ABI_VERSION, NULL) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_register_environment_spaces: description is NULL");
  d.obs_low = NULL;
  CHECK(troupe_register_environment_spaces(TROUPE_ABI_VERSION, &d) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_register_environment_spaces('CSpaces");
  CHECK_MESSAGE("obs_low NULL");
  d.obs_low = inverted;
  CHECK(troupe_register_environment_spaces(TROUPE_ABI_VERSION, &d) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_register_environment_spaces('CSpaces");
  CHECK_MESSAGE("obs bounds 0: low 500 must be <= high 100");
  d.obs_low = obs_low;
  if (troupe_register_environment_spaces(TROUPE_ABI_VERSION, &d) != TROUPE_OK) {
    CHECK(!"registering the spaces");
    return;
  }
  CHECK(troupe_register_environment_spaces(TROUPE_ABI_VERSION, &d) ==
        TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("already registered");

  snprintf(toml, sizeof toml,
           "[run]\nname = \"cspaces\"\nseed = 3\noutput_dir = \"%s\"\n"
           "checkpoint_every_updates = 0\n"
           "[env]\nid = \"%s\"\nnum_envs = 2\n"
           "[algo]\nname = \"ppo\"\nmode = \"sync\"\nnum_steps = 16\n",
           output_dir, id);
  /* Without an agent nothing could step it: start refuses, saying so. */
  if (troupe_session_open_toml(TROUPE_ABI_VERSION, toml, "cspaces.toml", NULL, 0, &s) !=
      TROUPE_OK) {
    CHECK(!"opening the runtime-driven session");
    return;
  }
  CHECK(troupe_session_start(s) == TROUPE_INVALID_ARGUMENT);
  CHECK_MESSAGE("troupe_session_start: env.id 'CSpaces");
  CHECK_MESSAGE("registered with its spaces only");
  CHECK_MESSAGE("make_agent()");
  troupe_session_free(s);

  /* With an agent it trains from what the game reports. */
  s = NULL;
  if (troupe_session_open_toml(TROUPE_ABI_VERSION, toml, "cspaces.toml", NULL, 0, &s) !=
      TROUPE_OK) {
    CHECK(!"opening the game-driven session");
    return;
  }
  CHECK(troupe_session_make_agent(s, 2, NULL, &a) == TROUPE_OK);
  CHECK(troupe_session_start(s) == TROUPE_OK);
  CHECK(troupe_agent_act(a, 0, obs, 2, &action, 1) == TROUPE_OK);
  CHECK(action == 0.0f || action == 1.0f);
  /* Both flags: accepted, terminated wins. */
  CHECK(troupe_agent_report(a, 0, 1.0, 1, 1, obs) == TROUPE_OK);
  CHECK(troupe_session_close(s, &progress) == TROUPE_OK);
  CHECK(progress.episodes == 1);
  troupe_agent_free(a);
  troupe_session_free(s);
  CHECK(troupe_unregister_environment(id) == TROUPE_OK);
  if (failures == 0) {
    char command[700];
    snprintf(command, sizeof command, "rm -rf '%s'", output_dir);
    if (system(command) != 0)
      fprintf(stderr, "could not remove %s\n", output_dir);
  }
}

int main(void) {
  walk_context context;
  char id[64], run_dir[512];
  memset(&context, 0, sizeof context);
  context.goal = 2.0f;

  abi_and_names();
  bad_config();
  null_handles();
  agent_before_start();
  spaces_only();
  if (train_walker(&context, id, sizeof id, run_dir, sizeof run_dir))
    policy_calls(run_dir);
  if (failures == 0) {
    char command[700];
    /* The run folder's parent was made for this test alone. */
    snprintf(command, sizeof command, "rm -rf \"$(dirname '%s')\"", run_dir);
    if (system(command) != 0)
      fprintf(stderr, "could not remove %s\n", run_dir);
  }
  printf("%s: %d failed checks\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
