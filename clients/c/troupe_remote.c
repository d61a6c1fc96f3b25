/* Client of troupe's remote environment protocol on libzmq (see troupe_remote.h). */
#include "troupe_remote.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

enum {
  kind_hello = 1,
  kind_welcome,
  kind_step,
  kind_act,
  kind_ping,
  kind_pong,
  kind_close,
  kind_error
};

#define MAX_FRAMES 8

struct troupe_remote {
  void* context;
  void* socket;
  char* endpoint;
  char name[160];
  int hello_timeout_ms;
  char server_key[41], public_key[41], secret_key[41]; /* empty: plaintext */
  int attempts, backoff_ms, backoff_max_ms;
  uint32_t reconnects;
  uint64_t sequence;
  uint64_t session;
  uint8_t minor;
  uint32_t num_envs, obs_dim, num_actions, action_width;
  int timeout_ms;
  uint32_t last_code;
};

/* A received message: its frames, owned. */
typedef struct {
  zmq_msg_t frames[MAX_FRAMES];
  int count;
  uint8_t kind;
  uint64_t sequence, session;
  uint32_t num_envs;
  uint8_t minor;
} message;

static int say(char* error, size_t size, int status, const char* fmt, ...) {
  if (error && size > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, size, fmt, args);
    va_end(args);
  }
  return status;
}

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void header(uint8_t out[32], const troupe_remote* r, uint8_t kind,
                   uint64_t sequence, uint32_t num_envs) {
  memset(out, 0, 32);
  memcpy(out, "TRPE", 4);
  out[4] = 1;
  out[5] = r->minor;
  out[6] = kind;
  put_u64(out + 8, sequence);
  put_u32(out + 16, num_envs);
  put_u64(out + 24, r->session);
}

static int send_frame(troupe_remote* r, const void* data, size_t size, int more) {
  return zmq_send(r->socket, data, size, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

static void release(message* m) {
  for (int i = 0; i < m->count; ++i)
    zmq_msg_close(&m->frames[i]);
  m->count = 0;
}

/* Receives one message within timeout_ms; decodes its header; turns ERROR and
 * CLOSE into statuses. */
static int receive(troupe_remote* r, message* m, int timeout_ms, const char* expected,
                   char* error, size_t size) {
  zmq_pollitem_t item = {r->socket, 0, ZMQ_POLLIN, 0};
  m->count = 0;
  int ready = zmq_poll(&item, 1, timeout_ms);
  if (ready < 0)
    return say(error, size, TROUPE_REMOTE_IO, "waiting for %s: %s", expected,
               zmq_strerror(zmq_errno()));
  if (ready == 0)
    return say(error, size, TROUPE_REMOTE_TIMEOUT, "no %s from troupe within %d ms",
               expected, timeout_ms);
  int more = 1;
  while (more) {
    if (m->count == MAX_FRAMES) {
      release(m);
      return say(error, size, TROUPE_REMOTE_IO, "a reply of more than %d frames",
                 MAX_FRAMES);
    }
    zmq_msg_init(&m->frames[m->count]);
    if (zmq_msg_recv(&m->frames[m->count], r->socket, 0) < 0) {
      zmq_msg_close(&m->frames[m->count]);
      release(m);
      return say(error, size, TROUPE_REMOTE_IO, "receiving %s: %s", expected,
                 zmq_strerror(zmq_errno()));
    }
    more = zmq_msg_more(&m->frames[m->count]);
    m->count += 1;
  }
  const uint8_t* h = (const uint8_t*)zmq_msg_data(&m->frames[0]);
  if (zmq_msg_size(&m->frames[0]) != 32 || memcmp(h, "TRPE", 4) != 0 || h[4] != 1) {
    release(m);
    return say(error, size, TROUPE_REMOTE_IO, "a reply without a version-1 TRPE header");
  }
  m->minor = h[5];
  m->kind = h[6];
  m->sequence = get_u64(h + 8);
  m->num_envs = get_u32(h + 16);
  m->session = get_u64(h + 24);
  if (m->kind == kind_error && m->count == 3 && zmq_msg_size(&m->frames[1]) == 4) {
    r->last_code = get_u32((const uint8_t*)zmq_msg_data(&m->frames[1]));
    int n = (int)zmq_msg_size(&m->frames[2]);
    say(error, size, TROUPE_REMOTE_ERROR, "troupe refused (code %u): %.*s", r->last_code,
        n, (const char*)zmq_msg_data(&m->frames[2]));
    release(m);
    return TROUPE_REMOTE_ERROR;
  }
  if (m->kind == kind_close) {
    r->session = 0;
    release(m);
    return say(error, size, TROUPE_REMOTE_CLOSED, "troupe ended the session");
  }
  return TROUPE_REMOTE_OK;
}

/* Copies a Z85 key of 40 characters into `out`; 0 when it is not one. */
static int copy_key(char out[41], const char* key) {
  uint8_t raw[32];
  if (!key || strlen(key) != 40 || !zmq_z85_decode(raw, key))
    return 0;
  memcpy(out, key, 41);
  return 1;
}

/* A new DEALER socket connected to r->endpoint (CURVE when keys are set). */
static int connect_socket(troupe_remote* r, char* error, size_t error_size) {
  if (r->socket)
    zmq_close(r->socket);
  r->socket = zmq_socket(r->context, ZMQ_DEALER);
  int linger = 0;
  if (!r->socket || zmq_setsockopt(r->socket, ZMQ_LINGER, &linger, sizeof linger) != 0)
    return say(error, error_size, TROUPE_REMOTE_IO, "cannot make a socket: %s",
               zmq_strerror(zmq_errno()));
  if (r->server_key[0] &&
      (zmq_setsockopt(r->socket, ZMQ_CURVE_SERVERKEY, r->server_key, 40) != 0 ||
       zmq_setsockopt(r->socket, ZMQ_CURVE_PUBLICKEY, r->public_key, 40) != 0 ||
       zmq_setsockopt(r->socket, ZMQ_CURVE_SECRETKEY, r->secret_key, 40) != 0))
    return say(error, error_size, TROUPE_REMOTE_IO, "cannot set the CURVE keys: %s",
               zmq_strerror(zmq_errno()));
  if (zmq_connect(r->socket, r->endpoint) != 0)
    return say(error, error_size, TROUPE_REMOTE_IO, "cannot connect to %s: %s",
               r->endpoint, zmq_strerror(zmq_errno()));
  return TROUPE_REMOTE_OK;
}

/* HELLO on r's socket and its WELCOME within r->hello_timeout_ms. */
static int say_hello(troupe_remote* r, char* error, size_t error_size) {
  char json[512];
  int n;
  if (r->num_actions > 0)
    n =
      snprintf(json, sizeof json,
               "{\"client\": \"%s\", \"num_envs\": %u, \"observation_space\": {\"type\": "
               "\"box\", \"shape\": [%u]}, \"action_space\": {\"type\": \"discrete\", "
               "\"n\": %u}}",
               r->name, r->num_envs, r->obs_dim, r->num_actions);
  else
    n =
      snprintf(json, sizeof json,
               "{\"client\": \"%s\", \"num_envs\": %u, \"observation_space\": {\"type\": "
               "\"box\", \"shape\": [%u]}, \"action_space\": {\"type\": \"box\", "
               "\"shape\": [%u]}}",
               r->name, r->num_envs, r->obs_dim, r->action_width);
  if (n < 0 || (size_t)n >= sizeof json)
    return say(error, error_size, TROUPE_REMOTE_INVALID, "the HELLO is too long");
  uint8_t h[32];
  r->session = 0;
  r->minor = 0;
  const uint64_t seq = ++r->sequence;
  header(h, r, kind_hello, seq, r->num_envs);
  message m;
  int status = TROUPE_REMOTE_IO;
  if (send_frame(r, h, 32, 1) != 0 || send_frame(r, json, (size_t)n, 0) != 0) {
    say(error, error_size, status, "sending HELLO: %s", zmq_strerror(zmq_errno()));
  } else if ((status = receive(r, &m, r->hello_timeout_ms, "WELCOME", error,
                               error_size)) == TROUPE_REMOTE_OK) {
    if (m.kind != kind_welcome || m.sequence != seq || m.session == 0) {
      status = say(error, error_size, TROUPE_REMOTE_IO,
                   "expected WELCOME of HELLO %llu, got kind %u", (unsigned long long)seq,
                   m.kind);
    } else {
      r->session = m.session;
      r->minor = m.minor;
      /* The server's time-out, from WELCOME's JSON. */
      const char* text = (const char*)zmq_msg_data(&m.frames[1]);
      size_t len = zmq_msg_size(&m.frames[1]);
      char copy[512];
      len = len < sizeof copy - 1 ? len : sizeof copy - 1;
      memcpy(copy, text, len);
      copy[len] = '\0';
      const char* t = strstr(copy, "\"timeout_ms\":");
      r->timeout_ms = t ? atoi(t + 13) : 10000;
      if (r->timeout_ms <= 0)
        r->timeout_ms = 10000;
    }
    release(&m);
  }
  return status;
}

troupe_remote* troupe_remote_open(const char* endpoint, const char* client_name,
                                  uint32_t num_envs, uint32_t obs_dim,
                                  uint32_t num_actions, uint32_t action_dim,
                                  int hello_timeout_ms, char* error, size_t error_size) {
  return troupe_remote_open_with(endpoint, client_name, num_envs, obs_dim, num_actions,
                                 action_dim, hello_timeout_ms, NULL, error, error_size);
}

troupe_remote* troupe_remote_open_with(const char* endpoint, const char* client_name,
                                       uint32_t num_envs, uint32_t obs_dim,
                                       uint32_t num_actions, uint32_t action_dim,
                                       int hello_timeout_ms,
                                       const troupe_remote_options* options, char* error,
                                       size_t error_size) {
  if (!endpoint || !client_name || num_envs == 0 || obs_dim == 0 ||
      (num_actions == 0 && action_dim == 0)) {
    say(
      error, error_size, TROUPE_REMOTE_INVALID,
      "troupe_remote_open: endpoint and client_name must not be NULL, num_envs, obs_dim "
      "and (num_actions or action_dim) must be positive");
    return NULL;
  }
  if (strlen(client_name) == 0 || strlen(client_name) > 128 ||
      strpbrk(client_name, "\"\\") != NULL) {
    say(error, error_size, TROUPE_REMOTE_INVALID,
        "troupe_remote_open: client_name must be 1 to 128 characters without a quote or "
        "backslash");
    return NULL;
  }
  troupe_remote* r = (troupe_remote*)calloc(1, sizeof *r);
  if (!r) {
    say(error, error_size, TROUPE_REMOTE_IO, "troupe_remote_open: out of memory");
    return NULL;
  }
  r->num_envs = num_envs;
  r->obs_dim = obs_dim;
  r->num_actions = num_actions;
  r->action_width = num_actions > 0 ? 1 : action_dim;
  r->hello_timeout_ms = hello_timeout_ms;
  strcpy(r->name, client_name);
  r->attempts =
    options && options->reconnect_attempts > 0 ? options->reconnect_attempts : 8;
  r->backoff_ms = options && options->backoff_ms > 0 ? options->backoff_ms : 100;
  r->backoff_max_ms =
    options && options->backoff_max_ms > 0 ? options->backoff_max_ms : 5000;
  if (options &&
      (options->server_public_key || options->public_key || options->secret_key)) {
    if (!copy_key(r->server_key, options->server_public_key) ||
        !copy_key(r->public_key, options->public_key) ||
        !copy_key(r->secret_key, options->secret_key)) {
      say(error, error_size, TROUPE_REMOTE_INVALID,
          "troupe_remote_open: CURVE needs server_public_key, public_key and secret_key, "
          "each 40 Z85 characters");
      troupe_remote_close(r);
      return NULL;
    }
  }
  r->endpoint = (char*)malloc(strlen(endpoint) + 1);
  r->context = zmq_ctx_new();
  if (!r->endpoint || !r->context) {
    say(error, error_size, TROUPE_REMOTE_IO, "troupe_remote_open: out of memory");
    troupe_remote_close(r);
    return NULL;
  }
  strcpy(r->endpoint, endpoint);
  if (connect_socket(r, error, error_size) != TROUPE_REMOTE_OK ||
      say_hello(r, error, error_size) != TROUPE_REMOTE_OK) {
    troupe_remote_close(r);
    return NULL;
  }
  return r;
}

int troupe_remote_retryable(const troupe_remote* r, int status) {
  if (status == TROUPE_REMOTE_TIMEOUT || status == TROUPE_REMOTE_IO)
    return 1;
  if (status != TROUPE_REMOTE_ERROR || !r)
    return 0;
  switch (r->last_code) {
  case 5:  /* out_of_order: a STEP before WELCOME, a second HELLO */
  case 6:  /* unknown_session: dropped, closed, or troupe restarted */
  case 14: /* too_many_errors */
  case 15: /* timeout */
  case 16: /* server_full */
    return 1;
  default:
    return 0;
  }
}

int troupe_remote_reconnect(troupe_remote* r, char* error, size_t error_size) {
  if (!r || !r->context)
    return say(error, error_size, TROUPE_REMOTE_INVALID,
               "troupe_remote_reconnect: no handle");
  int delay = r->backoff_ms;
  int status = TROUPE_REMOTE_IO;
  for (int attempt = 1; attempt <= r->attempts; ++attempt) {
    zmq_poll(NULL, 0, delay); /* the back-off: a bounded wait, nothing to wait on */
    delay = delay > r->backoff_max_ms / 2 ? r->backoff_max_ms : delay * 2;
    r->reconnects += 1;
    status = connect_socket(r, error, error_size);
    if (status == TROUPE_REMOTE_OK)
      status = say_hello(r, error, error_size);
    if (status == TROUPE_REMOTE_OK)
      return TROUPE_REMOTE_OK;
    if (!troupe_remote_retryable(r, status))
      return status;
  }
  if (error && error_size > 0) {
    char last[256];
    snprintf(last, sizeof last, "%s", error);
    say(error, error_size, status, "no new session after %d attempts: %s", r->attempts,
        last);
  }
  return status;
}

uint32_t troupe_remote_reconnects(const troupe_remote* r) {
  return r ? r->reconnects : 0;
}

int troupe_remote_step(troupe_remote* r, uint32_t k, const uint32_t* env_ids,
                       const float* obs, const double* rewards, const uint8_t* flags,
                       const float* final_obs, float* actions, uint64_t* policy_version,
                       char* error, size_t error_size) {
  if (!r || !r->session || k == 0 || k > r->num_envs || !env_ids || !obs || !actions)
    return say(
      error, error_size, TROUPE_REMOTE_INVALID,
      "troupe_remote_step: needs an open session, k in [1, %u], env_ids, obs and "
      "actions",
      r ? r->num_envs : 0);
  uint32_t ended = 0;
  for (uint32_t i = 0; flags && i < k; ++i)
    ended += flags[i] != 0;
  if (ended > 0 && !final_obs)
    return say(error, error_size, TROUPE_REMOTE_INVALID,
               "troupe_remote_step: %u episodes ended: final_obs is required", ended);
  uint8_t h[32];
  const uint64_t seq = ++r->sequence;
  header(h, r, kind_step, seq, k);
  /* Little-endian hosts only: the arrays go as they are in memory. */
  double* zeros = NULL;
  uint8_t* no_flags = NULL;
  if (!rewards)
    rewards = zeros = (double*)calloc(k, sizeof(double));
  if (!flags)
    flags = no_flags = (uint8_t*)calloc(k, 1);
  int failed = !rewards || !flags || send_frame(r, h, 32, 1) ||
               send_frame(r, env_ids, 4u * k, 1) ||
               send_frame(r, obs, 4u * (size_t)k * r->obs_dim, 1) ||
               send_frame(r, rewards, 8u * k, 1) || send_frame(r, flags, k, 1) ||
               send_frame(r, final_obs ? (const void*)final_obs : (const void*)"",
                          4u * (size_t)ended * r->obs_dim, 0);
  free(zeros);
  free(no_flags);
  if (failed)
    return say(error, error_size, TROUPE_REMOTE_IO, "sending STEP: %s",
               zmq_strerror(zmq_errno()));
  message m;
  int status = receive(r, &m, r->timeout_ms, "ACT", error, error_size);
  if (status != TROUPE_REMOTE_OK)
    return status;
  if (m.kind != kind_act || m.sequence != seq || m.num_envs != k || m.count != 4 ||
      zmq_msg_size(&m.frames[2]) != 4u * (size_t)k * r->action_width ||
      zmq_msg_size(&m.frames[3]) != 8) {
    release(&m);
    return say(error, error_size, TROUPE_REMOTE_IO,
               "expected ACT of STEP %llu for %u environments", (unsigned long long)seq,
               k);
  }
  const uint8_t* a = (const uint8_t*)zmq_msg_data(&m.frames[2]);
  if (r->num_actions > 0) {
    for (uint32_t i = 0; i < k; ++i)
      actions[i] = (float)(int32_t)get_u32(a + 4 * i);
  } else {
    memcpy(actions, a, 4u * (size_t)k * r->action_width);
  }
  if (policy_version)
    *policy_version = get_u64((const uint8_t*)zmq_msg_data(&m.frames[3]));
  release(&m);
  return TROUPE_REMOTE_OK;
}

int troupe_remote_ping(troupe_remote* r, char* error, size_t error_size) {
  if (!r || !r->session)
    return say(error, error_size, TROUPE_REMOTE_INVALID,
               "troupe_remote_ping: no session");
  uint8_t h[32];
  const uint64_t seq = ++r->sequence;
  header(h, r, kind_ping, seq, 0);
  if (send_frame(r, h, 32, 0) != 0)
    return say(error, error_size, TROUPE_REMOTE_IO, "sending PING: %s",
               zmq_strerror(zmq_errno()));
  message m;
  int status = receive(r, &m, r->timeout_ms, "PONG", error, error_size);
  if (status != TROUPE_REMOTE_OK)
    return status;
  const int ok = m.kind == kind_pong && m.sequence == seq;
  release(&m);
  return ok ? TROUPE_REMOTE_OK
            : say(error, error_size, TROUPE_REMOTE_IO, "expected PONG of PING %llu",
                  (unsigned long long)seq);
}

uint32_t troupe_remote_last_code(const troupe_remote* r) {
  return r ? r->last_code : 0;
}

uint64_t troupe_remote_session(const troupe_remote* r) {
  return r ? r->session : 0;
}

void troupe_remote_close(troupe_remote* r) {
  if (!r)
    return;
  if (r->socket && r->session) {
    uint8_t h[32];
    header(h, r, kind_close, ++r->sequence, 0);
    int linger = 1000;
    zmq_setsockopt(r->socket, ZMQ_LINGER, &linger, sizeof linger);
    send_frame(r, h, 32, 0);
  }
  if (r->socket)
    zmq_close(r->socket);
  if (r->context)
    zmq_ctx_term(r->context);
  free(r->endpoint);
  free(r);
}
