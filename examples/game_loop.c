/* A game that trains its own agents while it runs, through troupe's C API
 * (C99): the game drives. examples/game_loop.cpp is the same program in C++
 * and examples/catcher.hpp the same game; the rules are written again here
 * in C so that this file needs nothing but troupe.h.
 *
 * Catcher runs with several lanes, one agent slot per lane, in a
 * fixed-timestep loop: 60 frames per second in real time by default, as fast
 * as it goes with --unthrottled. Every frame each lane asks the agent for an
 * action (troupe_agent_act answers at once from the newest policy), steps
 * its game and reports the outcome; training runs on troupe's threads in the
 * same process. When stdout is a terminal, the first lane is drawn.
 *
 *   game_loop_c [--seconds S] [--frames N] [--lanes L] [--unthrottled] [--no-draw]
 *               [--output-dir DIR]
 *
 * At the end it prints act()'s latency (p50, p99, max), the frames that
 * missed their deadline, the policy version and the mean round return. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <troupe/troupe.h>

/* -- Catcher (the rules of examples/catcher.hpp) ----------------------------- */

enum { OBS_DIM = 4, NUM_ACTIONS = 3, FRUITS_PER_ROUND = 10, MAX_FRAMES = 400 };
static const float paddle_half = 0.08f, paddle_speed = 0.035f, fall_speed = 0.03f;

typedef struct lane {
  float paddle, fruit_x, fruit_y, fruit_vx;
  int fruits, frames, caught, missed;
  uint64_t s; /* splitmix64 state */
} lane;

static uint64_t lane_next(lane* l) {
  uint64_t z = (l->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float lane_uniform(lane* l, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(lane_next(l) >> 40) * (1.0 / 16777216.0));
}

static void lane_drop_fruit(lane* l) {
  l->fruit_x = lane_uniform(l, 0.05f, 0.95f);
  l->fruit_y = 1.0f;
  l->fruit_vx = lane_uniform(l, -0.01f, 0.01f);
}

static void lane_reset(lane* l) {
  l->paddle = 0.5f;
  l->fruits = l->frames = 0;
  lane_drop_fruit(l);
}

static void lane_observe(const lane* l, float* obs) {
  obs[0] = l->paddle * 2 - 1;
  obs[1] = (l->fruit_x - l->paddle) * 2;
  obs[2] = l->fruit_y * 2 - 1;
  obs[3] = l->fruit_vx * 100;
}

/* One frame with action 0 (left), 1 (stay) or 2 (right); the reward. */
static float lane_step(lane* l, int action, int* round_over) {
  float reward = 0;
  l->paddle += (float)(action - 1) * paddle_speed;
  l->paddle = fminf(1.0f, fmaxf(0.0f, l->paddle));
  l->fruit_x += l->fruit_vx;
  if (l->fruit_x < 0 || l->fruit_x > 1) {
    l->fruit_vx = -l->fruit_vx;
    l->fruit_x = fminf(1.0f, fmaxf(0.0f, l->fruit_x));
  }
  l->fruit_y -= fall_speed;
  ++l->frames;
  if (l->fruit_y <= 0) {
    const int hit = fabsf(l->fruit_x - l->paddle) <= paddle_half;
    reward = hit ? 1.0f : -1.0f;
    if (hit)
      ++l->caught;
    else
      ++l->missed;
    ++l->fruits;
    lane_drop_fruit(l);
  }
  *round_over = l->fruits >= FRUITS_PER_ROUND || l->frames >= MAX_FRAMES;
  return reward;
}

/* -- the program --------------------------------------------------------------- */

typedef struct options {
  double seconds;
  long frames; /* 0: until `seconds` have passed */
  size_t lanes;
  int unthrottled, draw;
  const char* output_dir;
} options;

static int parse(int argc, char** argv, options* o) {
  int i;
  for (i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--unthrottled") == 0) {
      o->unthrottled = 1;
    } else if (strcmp(a, "--no-draw") == 0) {
      o->draw = 0;
    } else if (strcmp(a, "--seconds") == 0 && v) {
      o->seconds = atof(v);
      ++i;
      if (!(o->seconds > 0))
        return 0;
    } else if (strcmp(a, "--frames") == 0 && v) {
      o->frames = atol(v);
      ++i;
      if (o->frames <= 0)
        return 0;
    } else if (strcmp(a, "--lanes") == 0 && v) {
      o->lanes = strtoul(v, NULL, 10);
      ++i;
      if (o->lanes == 0 || o->lanes > 4096)
        return 0;
    } else if (strcmp(a, "--output-dir") == 0 && v) {
      o->output_dir = v;
      ++i;
    } else {
      fprintf(stderr, "game_loop_c: bad option '%s'\n", a);
      return 0;
    }
  }
  return 1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The mean round return as printed: "-" until a round has ended. */
static const char* mean_text(double mean, char* text, size_t size) {
  if (isnan(mean))
    return "-";
  snprintf(text, size, "%.2f", mean);
  return text;
}

static void draw(const lane* l, uint64_t policy_version, double mean, long frame) {
  char text[32];
  enum { ROWS = 12, COLS = 40 };
  char grid[ROWS][COLS + 1];
  int r, c, fy, c0, c1;
  for (r = 0; r < ROWS; ++r) {
    memset(grid[r], ' ', COLS);
    grid[r][COLS] = 0;
  }
#define COL(x) ((int)fminf(COLS - 1, fmaxf(0, (x) * (COLS - 1) + 0.5f)))
  fy = (int)fminf(ROWS - 2, fmaxf(0, (1 - l->fruit_y) * (ROWS - 2)));
  grid[fy][COL(l->fruit_x)] = 'o';
  c0 = COL(l->paddle - paddle_half);
  c1 = COL(l->paddle + paddle_half);
  for (c = c0; c <= c1; ++c)
    grid[ROWS - 1][c] = '=';
#undef COL
  printf("\x1b[H");
  for (r = 0; r < ROWS; ++r)
    printf("|%s|\x1b[K\n", grid[r]);
  printf("frame %ld  caught %d  missed %d  policy v%llu  mean round return %s\x1b[K\n",
         frame, l->caught, l->missed, (unsigned long long)policy_version,
         mean_text(mean, text, sizeof text));
  fflush(stdout);
}

/* Reports a failed call with the library's message and returns 1. */
static int failed(const char* call, troupe_status s) {
  fprintf(stderr, "game_loop_c: %s: %s: %s\n", call, troupe_status_name(s),
          troupe_last_error());
  return 1;
}

#define HISTORY 100

int main(int argc, char** argv) {
  options o = {60, 0, 32, 0, 1, "runs"};
  troupe_env_description d;
  static const float obs_low[OBS_DIM] = {-1, -2, -1, -1},
                     obs_high[OBS_DIM] = {1, 2, 1, 1};
  char config[2048];
  troupe_session* session = NULL;
  troupe_agent* agent = NULL;
  troupe_progress p;
  troupe_status s;
  lane* lanes;
  double *round_return, *latency_us, history[HISTORY], mean = NAN;
  char text[32];
  size_t i, n_history = 0, next_history = 0, n_latency = 0, cap_latency;
  long frame = 0, missed_frames = 0;
  double start, deadline, next_print, period = 1.0 / 60, seconds;
  int terminal, rc = 0;

  if (!parse(argc, argv, &o)) {
    fprintf(stderr, "usage: game_loop_c [--seconds S] [--frames N] [--lanes L] "
                    "[--unthrottled] [--no-draw] [--output-dir DIR]\n");
    return 2;
  }
  terminal = o.draw && isatty(fileno(stdout));

  memset(&d, 0, sizeof d);
  d.id = "Catcher-v0";
  d.obs_dim = OBS_DIM;
  d.obs_low = obs_low;
  d.obs_high = obs_high;
  d.num_actions = NUM_ACTIONS;
  d.max_episode_steps = MAX_FRAMES;
  /* The game steps its lanes itself: troupe needs Catcher's spaces only. */
  if ((s = troupe_register_environment_spaces(TROUPE_ABI_VERSION, &d)) != TROUPE_OK)
    return failed("troupe_register_environment_spaces", s);

  /* PPO, the lanes' transitions gathered into small batches (4 segments of 32
   * frames), so that at 60 frames per second the policy improves within a minute. */
  snprintf(config, sizeof config,
           "[run]\nname = \"catcher_game_loop_c\"\nseed = 7\ndevice = \"cpu\"\n"
           "output_dir = \"%s\"\ncheckpoint_every_updates = 0\n"
           "[env]\nid = \"Catcher-v0\"\nnum_envs = 4\n"
           "[algo]\nname = \"ppo\"\nmode = \"async\"\ntotal_env_steps = 100000000\n"
           "num_steps = 32\nlearning_rate = 1e-3\nanneal_lr = false\n"
           "[algo.ppo]\nnum_minibatches = 2\nupdate_epochs = 4\n",
           o.output_dir);
  if ((s = troupe_session_open_toml(TROUPE_ABI_VERSION, config, "game_loop_c.toml", NULL,
                                    0, &session)) != TROUPE_OK)
    return failed("troupe_session_open_toml", s);
  if ((s = troupe_session_make_agent(session, o.lanes, NULL, &agent)) != TROUPE_OK) {
    rc = failed("troupe_session_make_agent", s);
    troupe_session_free(session);
    return rc;
  }
  if ((s = troupe_session_start(session)) != TROUPE_OK) {
    rc = failed("troupe_session_start", s);
    troupe_agent_free(agent);
    troupe_session_free(session);
    return rc;
  }

  lanes = calloc(o.lanes, sizeof *lanes);
  round_return = calloc(o.lanes, sizeof *round_return);
  cap_latency = 1u << 16;
  latency_us = malloc(cap_latency * sizeof *latency_us);
  if (!lanes || !round_return || !latency_us) {
    fprintf(stderr, "game_loop_c: out of memory\n");
    return 1;
  }
  for (i = 0; i < o.lanes; ++i) {
    lanes[i].s = 1000 + i;
    lane_reset(&lanes[i]);
  }
  start = now_s();
  deadline = start + period;
  next_print = start + 1;
  if (terminal)
    printf("\x1b[2J");

  for (;; ++frame) {
    double now;
    if (o.frames ? frame >= o.frames : now_s() - start >= o.seconds)
      break;
    for (i = 0; i < o.lanes && rc == 0; ++i) {
      float obs[OBS_DIM], final_obs[OBS_DIM], action = 1, r;
      int over = 0, terminated;
      double t0;
      lane_observe(&lanes[i], obs);
      t0 = now_s();
      s = troupe_agent_act(agent, i, obs, OBS_DIM, &action, 1);
      if (n_latency == cap_latency) {
        double* grown = realloc(latency_us, 2 * cap_latency * sizeof *latency_us);
        if (grown) {
          latency_us = grown;
          cap_latency *= 2;
        }
      }
      if (n_latency < cap_latency)
        latency_us[n_latency++] = (now_s() - t0) * 1e6;
      if (s != TROUPE_OK) {
        rc = failed("troupe_agent_act", s);
        break;
      }
      r = lane_step(&lanes[i], (int)action, &over);
      round_return[i] += r;
      terminated = over && lanes[i].fruits >= FRUITS_PER_ROUND;
      lane_observe(&lanes[i], final_obs);
      if ((s = troupe_agent_report(agent, i, r, terminated, over && !terminated,
                                   final_obs)) != TROUPE_OK) {
        rc = failed("troupe_agent_report", s);
        break;
      }
      if (over) {
        history[next_history] = round_return[i];
        next_history = (next_history + 1) % HISTORY;
        if (n_history < HISTORY)
          ++n_history;
        round_return[i] = 0;
        lane_reset(&lanes[i]);
      }
    }
    if (rc != 0)
      break;
    if (n_history > 0) {
      size_t k;
      mean = 0;
      for (k = 0; k < n_history; ++k)
        mean += history[k];
      mean /= (double)n_history;
    }
    now = now_s();
    if (terminal && frame % 2 == 0) {
      troupe_session_progress(session, &p);
      draw(&lanes[0], p.policy_version, mean, frame);
    } else if (!terminal && now >= next_print) {
      uint64_t dropped = 0;
      troupe_session_progress(session, &p);
      troupe_agent_dropped(agent, &dropped);
      printf("%6.1f s  frame %ld  policy v%llu  mean round return (last 100) %s  "
             "dropped %llu\n",
             now - start, frame, (unsigned long long)p.policy_version,
             mean_text(mean, text, sizeof text), (unsigned long long)dropped);
      fflush(stdout);
      next_print += 1;
    }
    if (!o.unthrottled) {
      if (now_s() > deadline) {
        ++missed_frames;
      } else {
        const double wait = deadline;
        struct timespec until;
        until.tv_sec = (time_t)wait;
        until.tv_nsec = (long)((wait - (double)until.tv_sec) * 1e9);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
        }
      }
      deadline += period;
    }
  }

  seconds = now_s() - start;
  memset(&p, 0, sizeof p);
  troupe_agent_free(agent); /* agents before their session */
  /* Stops training, writes the final checkpoint and gives the final progress. */
  if ((s = troupe_session_close(session, &p)) != TROUPE_OK && rc == 0)
    rc = failed("troupe_session_close", s);
  troupe_session_free(session);

  qsort(latency_us, n_latency, sizeof *latency_us, compare_doubles);
  printf("\nframes %ld in %.1f s (%s)\n", frame, seconds,
         o.unthrottled ? "unthrottled" : "60 per second");
  if (n_latency > 0)
    printf("act() latency over %zu calls: p50 %.2f us, p99 %.2f us, max %.1f us\n",
           n_latency, latency_us[(size_t)(0.50 * (double)(n_latency - 1) + 0.5)],
           latency_us[(size_t)(0.99 * (double)(n_latency - 1) + 0.5)],
           latency_us[n_latency - 1]);
  printf("frames that missed their deadline: %ld\n", missed_frames);
  printf("policy version %llu, updates %llu, transitions dropped %llu\n",
         (unsigned long long)p.policy_version, (unsigned long long)p.updates,
         (unsigned long long)p.transitions_dropped);
  printf("mean round return of the last %zu rounds: %s (random play: about -7)\n",
         n_history, mean_text(mean, text, sizeof text));
  free(lanes);
  free(round_return);
  free(latency_us);
  return rc;
}
