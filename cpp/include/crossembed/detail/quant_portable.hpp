// The first-pass kernels in portable C++ (quantized.hpp): included once per
// instruction set inside its namespace and target region, like isa_impl.hpp
// (the baseline, and AVX2 for the compiler's vectorisation). The integer dots
// are exact; bf16 values are widened (exact) and summed in float32 in
// dimension order. Expects kName, kLanes, bf16_t and Kernels in scope.
// (No include guard: included once per namespace.)

static void int8_scores(const std::int8_t* const* q, const std::int32_t* corr, const float* qs,
                        std::size_t nq, const std::uint8_t* panels, const float* ds, std::size_t nc,
                        std::size_t dp, float* out, std::size_t ld) {
  const std::size_t groups = dp / 4;
  for (std::size_t p0 = 0; p0 < nc; p0 += kLanes) {
    const std::uint8_t* P = panels + (p0 / kLanes) * groups * 64;
    const std::size_t w = std::min(kLanes, nc - p0);
    for (std::size_t i = 0; i < nq; ++i) {
      std::int32_t acc[kLanes] = {};
      const std::int8_t* qi = q[i];
      for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t l = 0; l < kLanes; ++l)
          for (std::size_t t = 0; t < 4; ++t)
            acc[l] += std::int32_t(P[g * 64 + l * 4 + t]) * std::int32_t(qi[g * 4 + t]);
      for (std::size_t l = 0; l < w; ++l)
        out[i * ld + p0 + l] = (float(acc[l] - corr[i]) * qs[i]) * ds[p0 + l];
    }
  }
}
static float widen(bf16_t h) {
  const std::uint32_t b = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}
static void bf16_scores(const bf16_t* const* q, std::size_t nq, const bf16_t* panels, std::size_t nc,
                        std::size_t dp, float* out, std::size_t ld) {
  const std::size_t groups = dp / 2;
  for (std::size_t p0 = 0; p0 < nc; p0 += kLanes) {
    const bf16_t* P = panels + (p0 / kLanes) * groups * 32;
    const std::size_t w = std::min(kLanes, nc - p0);
    for (std::size_t i = 0; i < nq; ++i) {
      float acc[kLanes] = {};
      for (std::size_t g = 0; g < groups; ++g) {
        const float q0 = widen(q[i][2 * g]), q1 = widen(q[i][2 * g + 1]);
        for (std::size_t l = 0; l < kLanes; ++l) {
          acc[l] += widen(P[g * 32 + 2 * l]) * q0;
          acc[l] += widen(P[g * 32 + 2 * l + 1]) * q1;
        }
      }
      for (std::size_t l = 0; l < w; ++l) out[i * ld + p0 + l] = acc[l];
    }
  }
}
static Kernels table() { return Kernels{kName, &int8_scores, &bf16_scores}; }
