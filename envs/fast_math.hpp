// Branch-free sine and cosine for |x| <= pi/4 (fdlibm's minimax kernels,
// within one ulp there, not bit-identical to libm) for batch kernels that the
// compiler vectorizes; outside that interval callers must use libm.
#pragma once

namespace troupe::envs::fast {

/// Largest |x| the kernels below are accurate for.
constexpr double max_small_angle = 0.7853981633974483; // pi / 4

/// sin(x) for |x| <= pi/4.
inline double sin_small(double x) noexcept {
  constexpr double s1 = -1.66666666666666324348e-01;
  constexpr double s2 = 8.33333333332248946124e-03;
  constexpr double s3 = -1.98412698298579493134e-04;
  constexpr double s4 = 2.75573137070700676789e-06;
  constexpr double s5 = -2.50507602534068634195e-08;
  constexpr double s6 = 1.58969099521155010221e-10;
  double z = x * x;
  double w = z * z;
  double r = s2 + z * (s3 + z * s4) + z * w * (s5 + z * s6);
  double v = z * x;
  return x + v * (s1 + z * r);
}

/// cos(x) for |x| <= pi/4.
inline double cos_small(double x) noexcept {
  constexpr double c1 = 4.16666666666666019037e-02;
  constexpr double c2 = -1.38888888888741095749e-03;
  constexpr double c3 = 2.48015872894767294178e-05;
  constexpr double c4 = -2.75573143513906633035e-07;
  constexpr double c5 = 2.08757232129817482790e-09;
  constexpr double c6 = -1.13596475577881948265e-11;
  double z = x * x;
  double w = z * z;
  double r = z * (c1 + z * (c2 + z * c3)) + w * w * (c4 + z * (c5 + z * c6));
  double hz = 0.5 * z;
  double one_minus_hz = 1.0 - hz;
  // (1 - one_minus_hz) - hz recovers the rounding error of 1 - hz.
  return one_minus_hz + (((1.0 - one_minus_hz) - hz) + z * r);
}

} // namespace troupe::envs::fast
