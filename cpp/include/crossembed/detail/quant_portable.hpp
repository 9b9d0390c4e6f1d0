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
// Two int8 rows (quantized.hpp's int8_row): one exact integer chain (the compiler vectorises it).
static float int8_distance(const void* pa, const void* pb, const void* pdim) {
  const std::size_t dp = padded_dim(*static_cast<const std::size_t*>(pdim));
  const unsigned char* a = static_cast<const unsigned char*>(pa);
  const unsigned char* b = static_cast<const unsigned char*>(pb);
  float sa, sb;
  std::memcpy(&sa, a, sizeof(sa));
  std::memcpy(&sb, b, sizeof(sb));
  const std::int8_t* ca = reinterpret_cast<const std::int8_t*>(a + kInt8RowHeader);
  const std::int8_t* cb = reinterpret_cast<const std::int8_t*>(b + kInt8RowHeader);
  std::int32_t dot = 0;
  for (std::size_t j = 0; j < dp; ++j) dot += std::int32_t(ca[j]) * std::int32_t(cb[j]);
  return int8_distance_of(dot, sa, sb);
}
// Two bf16 rows: widened values summed in kLanes float32 chains (value j into chain j % kLanes), then
// the chains by halving.
static float bf16_distance(const void* pa, const void* pb, const void* pdim) {
  const std::size_t n = bf16_row_values(*static_cast<const std::size_t*>(pdim));
  const bf16_t* a = static_cast<const bf16_t*>(pa);
  const bf16_t* b = static_cast<const bf16_t*>(pb);
  float acc[kLanes] = {};
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) acc[l] += widen(a[j + l]) * widen(b[j + l]);
  for (; j < n; ++j) acc[j % kLanes] += widen(a[j]) * widen(b[j]);
  for (std::size_t w = kLanes / 2; w; w /= 2)
    for (std::size_t l = 0; l < w; ++l) acc[l] += acc[l + w];
  return 1.0f - acc[0];
}
static Kernels table() { return Kernels{kName, &int8_scores, &bf16_scores, &int8_distance, &bf16_distance}; }
