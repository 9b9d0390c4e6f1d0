// Every kernel family of crossembed's C++ core on fixed inputs, compared with
// float64 reference values: a check of a build for another processor that
// needs no Python there (.ci/arm64 runs it for aarch64 under qemu-aarch64).
//
//   kernel_check CASES [DUMP]
//
// CASES comes from cpp/tests/kernel_cases.py (inputs and reference values,
// format described there). Each kernel runs on 1 and on 3 threads, which must
// agree bit for bit; its output is compared with the reference (a tolerance
// for float32 / float64 rounding, exact equality for pairs, votes, thresholds
// and hashes), and top-k scores must equal the dense scores of the same ids
// bit for bit. DUMP, if given, receives every output (same format), so that
// runs on two processors or instruction sets can be compared. Prints one line
// per check; exit status 1 if any failed. CROSSEMBED_SIMD picks the table as
// in the Python module.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "crossembed/csls.hpp"
#include "crossembed/greedy.hpp"
#include "crossembed/hash.hpp"
#include "crossembed/lorentz.hpp"
#include "crossembed/probit.hpp"
#include "crossembed/quantized.hpp"
#include "crossembed/signatures.hpp"
#include "crossembed/votes.hpp"

using namespace crossembed;

namespace {

struct Array {
  char dtype = 0;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
  std::size_t rows() const { return shape.empty() ? 1 : std::size_t(shape[0]); }
  std::size_t cols() const { return shape.size() < 2 ? 1 : std::size_t(shape[1]); }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <class T>
  std::vector<T> vec() const {
    return std::vector<T>(as<T>(), as<T>() + bytes.size() / sizeof(T));
  }
};

constexpr std::uint32_t kDtypeSize(char c) { return c == 'B' ? 1 : c == 'f' ? 4 : 8; }

std::map<std::string, Array> read_cases(const char* path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4];
  if (!f.read(magic, 4) || std::memcmp(magic, "CEK1", 4) != 0) throw std::runtime_error("not a cases file");
  std::map<std::string, Array> out;
  std::uint32_t len;
  while (f.read(reinterpret_cast<char*>(&len), 4)) {
    std::string name(len, '\0');
    Array a;
    std::uint32_t ndim;
    f.read(name.data(), len).read(&a.dtype, 1).read(reinterpret_cast<char*>(&ndim), 4);
    a.shape.resize(ndim);
    f.read(reinterpret_cast<char*>(a.shape.data()), std::streamsize(8 * ndim));
    std::size_t n = 1;
    for (const std::int64_t s : a.shape) n *= std::size_t(s);
    a.bytes.resize(n * kDtypeSize(a.dtype));
    if (!f.read(a.bytes.data(), std::streamsize(a.bytes.size()))) throw std::runtime_error("truncated at " + name);
    out.emplace(name, std::move(a));
  }
  return out;
}

class Checker {
 public:
  explicit Checker(std::map<std::string, Array> cases) : cases_(std::move(cases)) {}
  const Array& operator[](const std::string& name) const {
    const auto it = cases_.find(name);
    if (it == cases_.end()) throw std::runtime_error("no array " + name + " in the cases file");
    return it->second;
  }
  int failures() const { return failures_; }

  void report(const std::string& what, bool ok, const std::string& detail = "") {
    std::printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    failures_ += !ok;
  }

  // |got - want| <= tol * (|want| + scale) entrywise, scale = the largest |want|; NaN matches NaN only.
  template <class T>
  void close(const std::string& what, const std::vector<T>& got, const std::vector<double>& want, double tol) {
    double scale = 0, worst = 0;
    for (const double w : want)
      if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    bool ok = got.size() == want.size();
    for (std::size_t t = 0; ok && t < got.size(); ++t) {
      const double g = double(got[t]), w = want[t];
      if (std::isnan(w) || std::isinf(w)) {
        ok = std::isnan(w) ? std::isnan(g) : g == w;
        continue;
      }
      const double err = std::fabs(g - w) / (std::fabs(w) + scale);
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      ok = err <= tol;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, "%zu values, worst relative error %.2e (tolerance %.0e)", want.size(), worst, tol);
    report(what, ok, buf);
  }
  template <class T>
  void equal(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    report(what, got == want, std::to_string(want.size()) + " values, exactly");
  }
  // Outputs of two thread counts (or two paths) must be the same bits.
  template <class T>
  void same_bits(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
    const bool ok = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
    report(what, ok, "bit for bit");
  }

  template <class T>
  void dump(const std::string& name, const std::vector<T>& v) {
    dumped_.emplace_back(name, std::vector<char>(reinterpret_cast<const char*>(v.data()),
                                                 reinterpret_cast<const char*>(v.data() + v.size())));
    dump_types_.push_back(std::is_same_v<T, float> ? 'f' : std::is_same_v<T, double> ? 'd' : 'q');
  }
  void write_dump(const char* path) const {
    std::ofstream f(path, std::ios::binary);
    f.write("CEK1", 4);
    for (std::size_t t = 0; t < dumped_.size(); ++t) {
      const auto& [name, bytes] = dumped_[t];
      const std::uint32_t len = std::uint32_t(name.size()), ndim = 1;
      const std::int64_t n = std::int64_t(bytes.size() / kDtypeSize(dump_types_[t]));
      f.write(reinterpret_cast<const char*>(&len), 4).write(name.data(), len).write(&dump_types_[t], 1);
      f.write(reinterpret_cast<const char*>(&ndim), 4).write(reinterpret_cast<const char*>(&n), 8);
      f.write(bytes.data(), std::streamsize(bytes.size()));
    }
  }

 private:
  std::map<std::string, Array> cases_;
  int failures_ = 0;
  std::vector<std::pair<std::string, std::vector<char>>> dumped_;
  std::vector<char> dump_types_;
};

// Runs f(num_threads) on 1 and 3 threads; both results must be the same bits. Returns the first.
template <class F>
auto on_threads(Checker& c, const std::string& what, F f) {
  auto one = f(1), three = f(3);
  c.same_bits(what + ", 1 vs 3 threads", one, three);
  return one;
}

// Top-k rows (q, k): ids distinct and in range, and each score equal, bit for bit, to the dense score of its id.
void check_topk_ids(Checker& c, const std::string& what, const std::vector<float>& s,
                    const std::vector<std::int64_t>& ids, std::size_t q, std::size_t k, const std::vector<float>& dense,
                    std::size_t n) {
  bool ok = true;
  for (std::size_t i = 0; i < q; ++i)
    for (std::size_t t = 0; t < k; ++t) {
      const std::int64_t id = ids[i * k + t];
      if (id == -1) {
        ok = ok && std::isinf(s[i * k + t]) && s[i * k + t] < 0;
        continue;
      }
      ok = ok && id >= 0 && std::size_t(id) < n && s[i * k + t] == dense[i * n + std::size_t(id)];
      for (std::size_t u = 0; u < t; ++u) ok = ok && ids[i * k + u] != id;
    }
  c.report(what + ": ids valid, scores equal the dense ones", ok);
}

template <class Docs>
void check_probit(Checker& c, const std::string& tag, const std::vector<float>& v_c, double tol) {
  const Array &mq = c["probit.mu_q"], &mc = c["probit.mu_c"];
  const std::size_t q = mq.rows(), d = mq.cols(), n = mc.rows(), k = std::size_t(c["probit.k"].as<std::int64_t>()[0]);
  const Array& cand = c["probit.cand"];
  const std::size_t m = cand.cols();
  const Docs docs(mc.as<float>(), v_c.data(), n, d);
  const float *mu_q = mq.as<float>(), *v_q = c["probit.v_q"].as<float>();
  std::vector<float> mu_s(q * n), sig2(q * n);
  const auto dense = on_threads(c, tag + " scores", [&](int nt) {
    std::vector<float> s(q * n);
    docs.scores(mu_q, v_q, q, s.data(), mu_s.data(), sig2.data(), nt);
    return s;
  });
  c.close(tag + " scores", dense, c[tag + ".scores"].vec<double>(), tol);
  c.close(tag + " mu_s", mu_s, c[tag + ".mu_s"].vec<double>(), tol);
  c.close(tag + " sig2", sig2, c[tag + ".sig2"].vec<double>(), tol);
  std::vector<std::int64_t> ids(q * k), rids(q * k);
  const auto top = on_threads(c, tag + " topk", [&](int nt) {
    std::vector<float> s(q * k);
    docs.topk(mu_q, v_q, q, k, s.data(), ids.data(), nt);
    return s;
  });
  if (tag == "probit") c.close(tag + " topk", top, c["probit.top_s"].vec<double>(), tol);
  check_topk_ids(c, tag + " topk", top, ids, q, k, dense, n);
  const auto rer = on_threads(c, tag + " rerank", [&](int nt) {
    std::vector<float> s(q * k);
    docs.rerank(mu_q, v_q, q, cand.as<std::int64_t>(), m, k, s.data(), rids.data(), nt);
    return s;
  });
  if (tag == "probit") c.close(tag + " rerank", rer, c["probit.rerank_s"].vec<double>(), tol);
  check_topk_ids(c, tag + " rerank", rer, rids, q, k, dense, n);
  c.dump(tag + ".scores", dense);
  c.dump(tag + ".sig2", sig2);
  c.dump(tag + ".top_s", top);
  c.dump(tag + ".top_i", ids);
  c.dump(tag + ".rerank_s", rer);
}

void check_signatures(Checker& c) {
  const Array &x = c["sig.X"], &a = c["sig.anchors"];
  const std::size_t n = x.rows(), na = a.rows(), d = x.cols();
  const double median = median_anchor_distance(a.as<float>(), na, d, 3);
  c.close("median_anchor_distance", std::vector<double>{median}, c["sig.median"].vec<double>(), 1e-6);
  const double sigma = c["sig.median"].as<double>()[0];
  const auto sig = on_threads(c, "anchor_signatures", [&](int nt) {
    std::vector<float> out(n * na);
    anchor_signatures(x.as<float>(), n, a.as<float>(), na, d, sigma, out.data(), nt);
    return out;
  });
  c.close("anchor_signatures", sig, c["sig.out"].vec<double>(), 1e-6);
  const Array &cs = c["sfc.C"], &cols = c["sfc.cols"];
  const std::size_t v = cols.rows();
  const auto sfc = on_threads(c, "signatures_from_cosines", [&](int nt) {
    std::vector<float> out(cs.rows() * v);
    signatures_from_cosines(cs.as<float>(), cs.rows(), cs.cols(), cols.as<std::int64_t>(), v,
                            c["sfc.sigma"].as<double>()[0], out.data(), nt);
    return out;
  });
  c.close("signatures_from_cosines", sfc, c["sfc.out"].vec<double>(), 1e-6);
  c.dump("sig.out", sig);
  c.dump("sfc.out", sfc);
}

void check_csls_result(Checker& c, const std::string& what, const CslsResult& r, const std::string& key) {
  c.equal(what + " pairs", r.pairs, c["csls." + key + "pairs"].vec<std::int64_t>());
  c.close(what + " scores", r.scores, c["csls." + key + "scores"].vec<double>(), 1e-6);
}

void check_csls(Checker& c) {
  const Array &sa = c["csls.SA"], &sb = c["csls.SB"], &ca = c["csls.ca"], &cb = c["csls.cb"];
  const std::size_t na = sa.rows(), nb = sb.rows(), d = sa.cols();
  const std::uint8_t *ma = c["csls.ma"].as<std::uint8_t>(), *mb = c["csls.mb"].as<std::uint8_t>();
  const auto pairs = on_threads(c, "csls_mutual_topk", [&](int nt) {
    const CslsResult r = csls_mutual_topk(sa.as<float>(), na, sb.as<float>(), nb, d, 3, 7, ma, mb, nt);
    check_csls_result(c, "csls_mutual_topk (" + std::to_string(nt) + " threads)", r, "");
    return r.scores;
  });
  const auto cpairs = on_threads(c, "csls_mutual_topk_candidates", [&](int nt) {
    const CslsResult r = csls_mutual_topk_candidates(sa.as<float>(), na, sb.as<float>(), nb, d, ca.as<std::int64_t>(),
                                                     ca.cols(), cb.as<std::int64_t>(), cb.cols(), 3, 7, ma, mb, nt);
    check_csls_result(c, "csls_mutual_topk_candidates (" + std::to_string(nt) + " threads)", r, "cand_");
    return r.scores;
  });
  const std::size_t kr = c["csls.row_s"].cols(), kc = c["csls.col_s"].cols();
  std::vector<float> rs(na * kr), cs(nb * kc);
  std::vector<std::int64_t> ri(na * kr), ci(nb * kc);
  topk_rows_and_columns(sa.as<float>(), na, sb.as<float>(), nb, d, kr, kc, rs.data(), ri.data(), cs.data(), ci.data(),
                        3);
  c.close("topk_rows_and_columns rows", rs, c["csls.row_s"].vec<double>(), 1e-6);
  c.close("topk_rows_and_columns columns", cs, c["csls.col_s"].vec<double>(), 1e-6);
  // each listed id's score is its similarity (the transpose for columns)
  const std::vector<double> sim = c["csls.sim"].vec<double>();
  std::vector<double> at_rows(na * kr), at_cols(nb * kc);
  for (std::size_t t = 0; t < na * kr; ++t) at_rows[t] = sim[(t / kr) * nb + std::size_t(ri[t])];
  for (std::size_t t = 0; t < nb * kc; ++t) at_cols[t] = sim[std::size_t(ci[t]) * nb + t / kc];
  c.close("topk_rows_and_columns row ids", rs, at_rows, 1e-6);
  c.close("topk_rows_and_columns column ids", cs, at_cols, 1e-6);
  const auto dots = on_threads(c, "candidate_dots", [&](int nt) {
    std::vector<float> out(na * ca.cols());
    candidate_dots(sa.as<float>(), na, sb.as<float>(), d, ca.as<std::int64_t>(), ca.cols(), out.data(), nt);
    return out;
  });
  c.close("candidate_dots", dots, c["csls.dots"].vec<double>(), 1e-6);
  c.dump("csls.scores", pairs);
  c.dump("csls.cand_scores", cpairs);
  c.dump("csls.row_s", rs);
  c.dump("csls.dots", dots);
}

void check_discrete(Checker& c) {
  const Array& v = c["otsu.v"];
  const std::vector<double> t{otsu_threshold(v.as<double>(), v.rows(), 100),
                              otsu_threshold(v.as<double>(), v.rows(), 37)};
  c.equal("otsu_threshold", t, c["otsu.t"].vec<double>());
  const Array& p = c["greedy.pairs"];
  RowSet used_a, used_b;
  for (const std::int64_t i : c["greedy.ex_a"].vec<std::int64_t>()) used_a.insert(i);
  for (const std::int64_t j : c["greedy.ex_b"].vec<std::int64_t>()) used_b.insert(j);
  const auto taken = greedy_one_to_one(p.as<std::int64_t>(), c["greedy.scores"].as<double>(), p.rows(), 0.25, used_a,
                                       used_b, 12);
  std::vector<std::int64_t> out;
  for (const std::size_t t : taken)
    out.insert(out.end(), {p.as<std::int64_t>()[2 * t], p.as<std::int64_t>()[2 * t + 1]});
  c.equal("greedy_one_to_one", out, c["greedy.out"].vec<std::int64_t>());
  VoteTable table;
  for (const char* view : {"votes.view0", "votes.view1", "votes.view2"})
    table.add(c[view].as<std::int64_t>(), c[view].rows());
  const Array& query = c["votes.query"];
  std::vector<std::int64_t> counts(query.rows()), items, item_counts;
  for (std::size_t t = 0; t < query.rows(); ++t)
    counts[t] = table.votes(query.as<std::int64_t>()[2 * t], query.as<std::int64_t>()[2 * t + 1]);
  table.items(items, item_counts);
  c.equal("VoteTable votes", counts, c["votes.counts"].vec<std::int64_t>());
  c.equal("VoteTable items", items, c["votes.items"].vec<std::int64_t>());
  c.equal("VoteTable item counts", item_counts, c["votes.item_counts"].vec<std::int64_t>());
  c.report("VoteTable n_views", table.n_views() == 3);
  const Array& blob = c["hash.bytes"];
  const auto hash = on_threads(c, "content_hash", [&](int nt) {
    return std::vector<std::int64_t>{std::int64_t(content_hash(blob.bytes.data(), blob.bytes.size(), nt))};
  });
  c.equal("content_hash (the host's value)", hash, c["hash.value"].vec<std::int64_t>());
}

template <class T>
void check_lorentz(Checker& c, const std::string& tag, double tol) {
  const Array &x = c[tag + ".X"], &y = c[tag + ".Y"];
  const std::size_t nx = x.rows(), ny = y.rows(), d = x.cols(), k = c[tag + ".top_d"].cols();
  const double curv = c["lor.c"].as<double>()[0];
  const auto dist = on_threads(c, tag + " lorentz_pairwise", [&](int nt) {
    std::vector<T> out(nx * ny);
    lorentz_pairwise(x.as<T>(), nx, y.as<T>(), ny, d, curv, out.data(), nt);
    return out;
  });
  c.close(tag + " lorentz_pairwise", dist, c[tag + ".dist"].vec<double>(), tol);
  std::vector<T> top(nx * k);
  std::vector<std::int64_t> idx(nx * k);
  lorentz_topk(x.as<T>(), nx, y.as<T>(), ny, d, k, curv, top.data(), idx.data(), 3);
  c.close(tag + " lorentz_topk", top, c[tag + ".top_d"].vec<double>(), tol);
  bool ok = true;
  for (std::size_t t = 0; t < nx * k; ++t) ok = ok && idx[t] >= 0 && top[t] == dist[(t / k) * ny + std::size_t(idx[t])];
  c.report(tag + " lorentz_topk: distances equal the pairwise ones", ok);
  c.dump(tag + ".dist", dist);
}

// QuantizedDocs on the probit case's means: with every doc a candidate its top-k is the float32 kernel's
// (ProbitDocs, zero variances) bit for bit; the first pass's code scores and ids are dumped (int8: integer
// dots times the same two scales; bf16 on the generic table: float32 sums in order), so .ci/arm64 compares
// the generic table's candidate lists across processors.
void check_quantized(Checker& c) {
  const Array &mq = c["probit.mu_q"], &mc = c["probit.mu_c"];
  const std::size_t q = mq.rows(), d = mq.cols(), n = mc.rows(), k = std::size_t(c["probit.k"].as<std::int64_t>()[0]);
  const std::vector<float> zq(q * d, 0.0f), zc(n * d, 0.0f);
  const ProbitDocs plain(mc.as<float>(), zc.data(), n, d);
  std::vector<float> want(q * k);
  std::vector<std::int64_t> want_ids(q * k);
  plain.topk(mq.as<float>(), zq.data(), q, k, want.data(), want_ids.data(), 1);
  for (const auto code : {QuantizedDocs::Code::int8, QuantizedDocs::Code::bf16}) {
    const std::string tag = code == QuantizedDocs::Code::int8 ? "quant8" : "quant16";
    const QuantizedDocs docs(mc.as<float>(), n, d, code, 3);
    std::vector<std::int64_t> ids(q * k);
    const auto top = on_threads(c, tag + " topk", [&](int nt) {
      std::vector<float> s(q * k);
      docs.topk(mq.as<float>(), q, k, n, s.data(), ids.data(), nt);
      return s;
    });
    c.same_bits(tag + " topk, every doc a candidate: the float32 kernel's scores", top, want);
    c.equal(tag + " topk ids", ids, want_ids);
    const std::size_t m = 40;
    std::vector<std::int64_t> cand(q * m);
    const auto approx = on_threads(c, tag + " candidates", [&](int nt) {
      std::vector<float> s(q * m);
      docs.candidates(mq.as<float>(), q, m, cand.data(), s.data(), nt);
      return s;
    });
    c.dump(tag + ".approx", approx);
    c.dump(tag + ".cand", cand);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CASES [DUMP]\n", argv[0]);
    return 2;
  }
  Checker c(read_cases(argv[1]));
  std::printf("simd table: %s, max threads %d\n", simd::isa().name, max_threads());
  check_probit<ProbitDocs>(c, "probit", c["probit.v_c"].vec<float>(), 1e-6);
  check_probit<ProbitDocsF16>(c, "probit16", c["probit16.v_c"].vec<float>(), 1e-6);
  check_signatures(c);
  check_csls(c);
  check_discrete(c);
  check_lorentz<double>(c, "lor", 1e-12);
  check_lorentz<float>(c, "lor32", 1e-6);
  check_quantized(c);
  if (argc > 2) c.write_dump(argv[2]);
  std::printf("%s: %d check(s) failed\n", c.failures() ? "FAILED" : "passed", c.failures());
  return c.failures() ? 1 : 0;
}
