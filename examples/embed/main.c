/* The C API from an embedder's C program: loads a trained policy (a run
 * folder, a checkpoint folder or a policy file) and acts on observations
 * given on the command line.
 *
 * usage: embed_c POLICY X0 X1 ... */
#include <stdio.h>
#include <stdlib.h>

#include <troupe/troupe.h>

int main(int argc, char** argv) {
  troupe_policy* policy = NULL;
  troupe_policy_info info;
  float obs[64], action[64];
  size_t i, n;
  if (argc < 3 || argc - 2 > 64) {
    fprintf(stderr, "usage: embed_c POLICY X0 X1 ... (at most 64 values)\n");
    return 2;
  }
  if (troupe_policy_load(TROUPE_ABI_VERSION, argv[1], &policy) != TROUPE_OK ||
      troupe_policy_info_get(policy, &info) != TROUPE_OK) {
    fprintf(stderr, "embed_c: %s\n", troupe_last_error());
    troupe_policy_free(policy);
    return 1;
  }
  n = (size_t)(argc - 2);
  for (i = 0; i < n; ++i)
    obs[i] = strtof(argv[i + 2], NULL);
  if (troupe_policy_act(policy, obs, n, action, 64, 1, 0) != TROUPE_OK) {
    fprintf(stderr, "embed_c: %s\n", troupe_last_error());
    troupe_policy_free(policy);
    return 1;
  }
  printf("obs_dim %zu, %s, action", info.obs_dim, info.discrete ? "discrete" : "box");
  for (i = 0; i < info.action_dim; ++i)
    printf(" %g", (double)action[i]);
  printf("\n");
  troupe_policy_free(policy);
  return 0;
}
