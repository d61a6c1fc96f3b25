/* A stand-in for the NVIDIA driver (libcuda.so.1) with FAKE_GPUS devices: the
 * three driver API calls the CUDA plugin loader makes (learners/cuda_plugin.cpp). */

/** CUDA_SUCCESS, or CUDA_ERROR_NO_DEVICE (100) when there is no GPU. */
int cuInit(unsigned flags) {
  (void)flags;
  return FAKE_GPUS > 0 ? 0 : 100;
}

/** Writes FAKE_GPUS. */
int cuDeviceGetCount(int* count) {
  *count = FAKE_GPUS;
  return 0;
}

/** The name of the one error this driver returns. */
int cuGetErrorName(int code, const char** name) {
  if (code != 100)
    return 1;
  *name = "CUDA_ERROR_NO_DEVICE";
  return 0;
}
