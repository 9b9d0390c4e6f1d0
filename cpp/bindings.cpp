// The one pybind11 module, crossembed._core.
//
// Thin on purpose: python/crossembed/kernels.py validates every argument
// (shape, dtype, finiteness, ranges) and passes C-contiguous arrays; here we
// only re-check what would make C++ read out of bounds, allocate outputs,
// release the GIL and call the header-only kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "crossembed/csls.hpp"
#include "crossembed/graph.hpp"
#include "crossembed/greedy.hpp"
#include "crossembed/hash.hpp"
#include "crossembed/lorentz.hpp"
#include "crossembed/probit.hpp"
#include "crossembed/quantized.hpp"
#include "crossembed/signatures.hpp"
#include "crossembed/votes.hpp"

namespace py = pybind11;
using namespace crossembed;

template <class T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

namespace {

template <class T>
void require_2d(const CArray<T>& a, const char* name) {
  if (a.ndim() != 2) throw py::value_error(std::string(name) + " must be 2-dimensional");
}

template <class T>
void require_same_dim(const CArray<T>& a, const CArray<T>& b, const char* an, const char* bn) {
  if (a.shape(1) != b.shape(1))
    throw py::value_error(std::string(an) + " and " + bn + " must have the same number of columns");
}

py::array_t<float> new_f32(py::ssize_t r, py::ssize_t c) { return py::array_t<float>({r, c}); }

// Index arrays are copied (with the GIL held) and the copy is range-checked:
// the kernels read the copy after the GIL is released, so another Python
// thread rewriting the caller's array cannot make them read out of bounds.
std::vector<std::int64_t> checked_indices(const CArray<std::int64_t>& a, std::int64_t hi, const char* name) {
  std::vector<std::int64_t> out(a.data(), a.data() + a.size());
  for (const std::int64_t v : out)
    if (v < -1 || v >= hi) throw py::value_error(std::string(name) + " out of range");
  return out;
}

// Docs: ProbitDocs (float32 storage) or ProbitDocsF16.
template <class Docs>
struct PyProbitDocs {
  Docs docs;
  PyProbitDocs(const CArray<float>& mu, const CArray<float>& v)
      : docs(checked(mu, v).data(), v.data(), std::size_t(mu.shape(0)), std::size_t(mu.shape(1))) {}

  static const CArray<float>& checked(const CArray<float>& mu, const CArray<float>& v) {
    require_2d(mu, "mu_c");
    require_2d(v, "v_c");
    if (mu.shape(0) != v.shape(0) || mu.shape(1) != v.shape(1)) throw py::value_error("mu_c and v_c must have the same shape");
    return mu;
  }

  void check_queries(const CArray<float>& mu, const CArray<float>& v) const {
    require_2d(mu, "mu_q");
    require_2d(v, "v_q");
    if (mu.shape(0) != v.shape(0) || mu.shape(1) != v.shape(1)) throw py::value_error("mu_q and v_q must have the same shape");
    if (std::size_t(mu.shape(1)) != docs.dim()) throw py::value_error("mu_q has the wrong dimension");
  }

  py::tuple topk(const CArray<float>& mu, const CArray<float>& v, std::size_t k, int nt) const {
    check_queries(mu, v);
    if (k < 1 || k > docs.size()) throw py::value_error("k must be in [1, N]");
    const auto q = mu.shape(0);
    auto s = new_f32(q, py::ssize_t(k));
    py::array_t<std::int64_t> idx({q, py::ssize_t(k)});
    float* sp = s.mutable_data();
    std::int64_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release release;
      docs.topk(mu.data(), v.data(), std::size_t(q), k, sp, ip, nt);
    }
    return py::make_tuple(s, idx);
  }

  py::tuple rerank(const CArray<float>& mu, const CArray<float>& v, const CArray<std::int64_t>& cand, std::size_t k,
                   int nt) const {
    check_queries(mu, v);
    require_2d(cand, "candidates");
    if (cand.shape(0) != mu.shape(0)) throw py::value_error("candidates must have one row per query");
    const std::size_t m = std::size_t(cand.shape(1));
    if (k < 1 || k > m) throw py::value_error("k must be in [1, M]");
    const std::vector<std::int64_t> cv = checked_indices(cand, std::int64_t(docs.size()), "candidates");
    const std::int64_t* cp = cv.data();
    const auto q = mu.shape(0);
    auto s = new_f32(q, py::ssize_t(k));
    py::array_t<std::int64_t> idx({q, py::ssize_t(k)});
    float* sp = s.mutable_data();
    std::int64_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release release;
      docs.rerank(mu.data(), v.data(), std::size_t(q), cp, m, k, sp, ip, nt);
    }
    return py::make_tuple(s, idx);
  }

  py::tuple scores(const CArray<float>& mu, const CArray<float>& v, int nt) const {
    check_queries(mu, v);
    const auto q = mu.shape(0), n = py::ssize_t(docs.size());
    auto s = new_f32(q, n), m = new_f32(q, n), g = new_f32(q, n);
    float *sp = s.mutable_data(), *mp = m.mutable_data(), *gp = g.mutable_data();
    {
      py::gil_scoped_release release;
      docs.scores(mu.data(), v.data(), std::size_t(q), sp, mp, gp, nt);
    }
    return py::make_tuple(s, m, g);
  }
};

template <class Docs>
void bind_probit_docs(py::module_& m, const char* name) {
  using P = PyProbitDocs<Docs>;
  py::class_<P>(m, name)
      .def(py::init<const CArray<float>&, const CArray<float>&>())
      .def("topk", &P::topk)
      .def("rerank", &P::rerank)
      .def("scores", &P::scores)
      .def_property_readonly("nbytes", [](const P& p) { return p.docs.nbytes(); })
      .def_property_readonly("max_second_moment", [](const P& p) { return p.docs.max_second_moment(); })
      // (all finite, smallest v_c, largest |mu_c|, largest v_c): what kernels.py checks, from the packing pass
      .def_property_readonly("input_stats", [](const P& p) {
        const auto& st = p.docs.input_stats();
        return py::make_tuple(st.finite, st.min_v, st.max_abs_mu, st.max_v);
      });
}

// The means array is held here: the codes' rescoring reads it (with the GIL released) for the object's life.
struct PyQuantizedDocs {
  CArray<float> means;
  QuantizedDocs docs;
  PyQuantizedDocs(const CArray<float>& mu, const std::string& code, int nt)
      : means(checked(mu)), docs(build(means, code, nt)) {}

  static const CArray<float>& checked(const CArray<float>& mu) {
    require_2d(mu, "means");
    if (mu.shape(1) > 65536) throw py::value_error("means has more than 65536 columns");
    return mu;
  }
  static QuantizedDocs build(const CArray<float>& mu, const std::string& code, int nt) {
    if (code != "int8" && code != "bf16") throw py::value_error("codes must be 'int8' or 'bf16'");
    const auto c = code == "int8" ? QuantizedDocs::Code::int8 : QuantizedDocs::Code::bf16;
    py::gil_scoped_release release;
    return QuantizedDocs(mu.data(), std::size_t(mu.shape(0)), std::size_t(mu.shape(1)), c, nt);
  }
  void check_queries(const CArray<float>& x, std::size_t m) const {
    require_2d(x, "queries");
    if (std::size_t(x.shape(1)) != docs.dim()) throw py::value_error("queries has the wrong dimension");
    if (m < 1 || m > docs.size()) throw py::value_error("candidates must be in [1, N]");
  }
  py::tuple topk(const CArray<float>& x, std::size_t k, std::size_t m, int nt) const {
    check_queries(x, m);
    if (k < 1 || k > m) throw py::value_error("k must be in [1, candidates]");
    const auto q = x.shape(0);
    auto s = new_f32(q, py::ssize_t(k));
    py::array_t<std::int64_t> idx({q, py::ssize_t(k)});
    float* sp = s.mutable_data();
    std::int64_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release release;
      docs.topk(x.data(), std::size_t(q), k, m, sp, ip, nt);
    }
    return py::make_tuple(s, idx);
  }
  py::tuple candidates(const CArray<float>& x, std::size_t m, int nt) const {
    check_queries(x, m);
    const auto q = x.shape(0);
    auto s = new_f32(q, py::ssize_t(m));
    py::array_t<std::int64_t> idx({q, py::ssize_t(m)});
    float* sp = s.mutable_data();
    std::int64_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release release;
      docs.candidates(x.data(), std::size_t(q), m, ip, sp, nt);
    }
    return py::make_tuple(s, idx);
  }
};

py::tuple csls_result_to_python(const CslsResult& r) {
  const py::ssize_t p = py::ssize_t(r.scores.size());
  py::array_t<std::int64_t> pairs({p, py::ssize_t(2)});
  std::copy(r.pairs.begin(), r.pairs.end(), pairs.mutable_data());
  py::array_t<float> scores(p);
  std::copy(r.scores.begin(), r.scores.end(), scores.mutable_data());
  return py::make_tuple(pairs, scores);
}

template <class T>
py::array_t<T> lorentz_pairwise_py(const CArray<T>& x, const CArray<T>& y, double c, int nt) {
  require_2d(x, "X");
  require_2d(y, "Y");
  require_same_dim(x, y, "X", "Y");
  py::array_t<T> out({x.shape(0), y.shape(0)});
  T* op = out.mutable_data();
  {
    py::gil_scoped_release release;
    lorentz_pairwise(x.data(), std::size_t(x.shape(0)), y.data(), std::size_t(y.shape(0)), std::size_t(x.shape(1)), c,
                     op, nt);
  }
  return out;
}

template <class T>
py::tuple lorentz_topk_py(const CArray<T>& x, const CArray<T>& y, std::size_t k, double c, int nt) {
  require_2d(x, "X");
  require_2d(y, "Y");
  require_same_dim(x, y, "X", "Y");
  if (k < 1 || k > std::size_t(y.shape(0))) throw py::value_error("k must be in [1, len(Y)]");
  py::array_t<T> dist({x.shape(0), py::ssize_t(k)});
  py::array_t<std::int64_t> idx({x.shape(0), py::ssize_t(k)});
  T* dp = dist.mutable_data();
  std::int64_t* ip = idx.mutable_data();
  {
    py::gil_scoped_release release;
    lorentz_topk(x.data(), std::size_t(x.shape(0)), y.data(), std::size_t(y.shape(0)), std::size_t(x.shape(1)), k, c,
                 dp, ip, nt);
  }
  return py::make_tuple(dist, idx);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "crossembed C++ kernels (use crossembed.kernels: it validates inputs)";
  m.def("simd_level", []() { return std::string(simd::isa().name); });
  m.def("max_threads", &max_threads);
  // At import: every process forked after `import crossembed` runs its kernels on one thread (parallel.hpp).
  install_fork_guard();
  m.def("single_threaded_after_fork", &single_threaded_after_fork);
  // Whether parallel_for runs on OpenMP (else std::thread workers).
#if defined(CROSSEMBED_HAVE_OPENMP)
  m.attr("openmp") = true;
#else
  m.attr("openmp") = false;
#endif

  bind_probit_docs<ProbitDocs>(m, "ProbitDocs");
  bind_probit_docs<ProbitDocsF16>(m, "ProbitDocsF16");
  py::class_<PyQuantizedDocs>(m, "QuantizedDocs")
      .def(py::init<const CArray<float>&, const std::string&, int>())
      .def("topk", &PyQuantizedDocs::topk)
      .def("candidates", &PyQuantizedDocs::candidates)
      .def_property_readonly("nbytes", [](const PyQuantizedDocs& p) { return p.docs.nbytes(); });
  m.def("quantized_kernels", []() { return std::string(quant::kernels().name); });

  // Hash of a C-contiguous array's bytes (the GIL is released while it reads).
  m.def("content_hash", [](const py::array& a, int nt) {
    if (!(a.flags() & py::array::c_style)) throw py::value_error("content_hash needs a C-contiguous array");
    const void* p = a.data();
    const std::size_t bytes = std::size_t(a.nbytes());
    py::gil_scoped_release release;
    return content_hash(p, bytes, nt);
  });

  m.def("median_anchor_distance", [](const CArray<float>& a, int nt) {
    require_2d(a, "anchors");
    py::gil_scoped_release release;
    return median_anchor_distance(a.data(), std::size_t(a.shape(0)), std::size_t(a.shape(1)), nt);
  });
  m.def("anchor_signatures", [](const CArray<float>& x, const CArray<float>& a, double sigma, int nt) {
    require_2d(x, "X");
    require_2d(a, "anchors");
    require_same_dim(x, a, "X", "anchors");
    if (!(sigma > 0)) throw py::value_error("sigma must be > 0");
    auto out = new_f32(x.shape(0), a.shape(0));
    float* op = out.mutable_data();
    bool finite = true;
    {
      py::gil_scoped_release release;
      finite = anchor_signatures(x.data(), std::size_t(x.shape(0)), a.data(), std::size_t(a.shape(0)),
                                 std::size_t(x.shape(1)), sigma, op, nt);
    }
    if (!finite) throw py::value_error("X must be finite (found NaN or inf)");
    return out;
  });

  m.def("signatures_from_cosines", [](const CArray<float>& c, const CArray<std::int64_t>& cols, double sigma, int nt) {
    require_2d(c, "C");
    if (cols.ndim() != 1) throw py::value_error("cols must be 1-dimensional");
    if (!(sigma > 0)) throw py::value_error("sigma must be > 0");
    const std::size_t n = std::size_t(c.shape(0)), p = std::size_t(c.shape(1));
    const std::vector<std::int64_t> idx = checked_indices(cols, std::int64_t(p), "cols");  // a copy: see above
    for (const std::int64_t j : idx)
      if (j < 0) throw py::value_error("cols out of range");
    auto out = new_f32(c.shape(0), py::ssize_t(idx.size()));
    float* op = out.mutable_data();
    {
      py::gil_scoped_release release;
      signatures_from_cosines(c.data(), n, p, idx.data(), idx.size(), sigma, op, nt);
    }
    return out;
  });

  m.def("csls_mutual_topk", [](const CArray<float>& sa, const CArray<float>& sb, std::size_t k, std::size_t csls_k,
                               const CArray<std::uint8_t>& ma, const CArray<std::uint8_t>& mb, int nt) {
    require_2d(sa, "SA");
    require_2d(sb, "SB");
    require_same_dim(sa, sb, "SA", "SB");
    if (ma.size() != sa.shape(0) || mb.size() != sb.shape(0)) throw py::value_error("exclusion masks have the wrong length");
    if (k < 1 || csls_k < 1) throw py::value_error("k and csls_k must be >= 1");
    CslsResult r;
    {
      py::gil_scoped_release release;
      r = csls_mutual_topk(sa.data(), std::size_t(sa.shape(0)), sb.data(), std::size_t(sb.shape(0)),
                           std::size_t(sa.shape(1)), k, csls_k, ma.data(), mb.data(), nt);
    }
    return csls_result_to_python(r);
  });

  m.def("topk_rows_and_columns", [](const CArray<float>& sa, const CArray<float>& sb, std::size_t k_row,
                                    std::size_t k_col, int nt) {
    require_2d(sa, "SA");
    require_2d(sb, "SB");
    require_same_dim(sa, sb, "SA", "SB");
    if (k_row > std::size_t(sb.shape(0)) || k_col > std::size_t(sa.shape(0)))
      throw py::value_error("k_row must be <= rows of SB and k_col <= rows of SA");
    auto rs = new_f32(sa.shape(0), py::ssize_t(k_row));
    auto cs = new_f32(sb.shape(0), py::ssize_t(k_col));
    py::array_t<std::int64_t> ri({sa.shape(0), py::ssize_t(k_row)}), ci({sb.shape(0), py::ssize_t(k_col)});
    float *rsp = rs.mutable_data(), *csp = cs.mutable_data();
    std::int64_t *rip = ri.mutable_data(), *cip = ci.mutable_data();
    {
      py::gil_scoped_release release;
      topk_rows_and_columns(sa.data(), std::size_t(sa.shape(0)), sb.data(), std::size_t(sb.shape(0)),
                            std::size_t(sa.shape(1)), k_row, k_col, rsp, rip, csp, cip, nt);
    }
    return py::make_tuple(rs, ri, cs, ci);
  });

  m.def("csls_mutual_topk_candidates",
        [](const CArray<float>& sa, const CArray<float>& sb, const CArray<std::int64_t>& ca,
           const CArray<std::int64_t>& cb, std::size_t k, std::size_t csls_k, const CArray<std::uint8_t>& ma,
           const CArray<std::uint8_t>& mb, int nt) {
          require_2d(sa, "SA");
          require_2d(sb, "SB");
          require_same_dim(sa, sb, "SA", "SB");
          require_2d(ca, "cand_a");
          require_2d(cb, "cand_b");
          if (ca.shape(0) != sa.shape(0) || cb.shape(0) != sb.shape(0))
            throw py::value_error("cand_a / cand_b must have one row per row of SA / SB");
          if (ma.size() != sa.shape(0) || mb.size() != sb.shape(0)) throw py::value_error("exclusion masks have the wrong length");
          const std::vector<std::int64_t> cav = checked_indices(ca, sb.shape(0), "cand_a");
          const std::vector<std::int64_t> cbv = checked_indices(cb, sa.shape(0), "cand_b");
          if (k < 1 || csls_k < 1) throw py::value_error("k and csls_k must be >= 1");
          CslsResult r;
          {
            py::gil_scoped_release release;
            r = csls_mutual_topk_candidates(sa.data(), std::size_t(sa.shape(0)), sb.data(), std::size_t(sb.shape(0)),
                                            std::size_t(sa.shape(1)), cav.data(), std::size_t(ca.shape(1)), cbv.data(),
                                            std::size_t(cb.shape(1)), k, csls_k, ma.data(), mb.data(), nt);
          }
          return csls_result_to_python(r);
        });

  m.def("candidate_dots", [](const CArray<float>& x, const CArray<float>& y, const CArray<std::int64_t>& cand, int nt) {
    require_2d(x, "X");
    require_2d(y, "Y");
    require_same_dim(x, y, "X", "Y");
    require_2d(cand, "cand");
    if (cand.shape(0) != x.shape(0)) throw py::value_error("cand must have one row per row of X");
    const std::vector<std::int64_t> cv = checked_indices(cand, y.shape(0), "cand");
    auto out = new_f32(cand.shape(0), cand.shape(1));
    float* op = out.mutable_data();
    {
      py::gil_scoped_release release;
      candidate_dots(x.data(), std::size_t(x.shape(0)), y.data(), std::size_t(x.shape(1)), cv.data(),
                     std::size_t(cand.shape(1)), op, nt);
    }
    return out;
  });

  m.def("otsu_threshold", [](const CArray<double>& v, int bins) {
    if (bins < 2) throw py::value_error("bins must be >= 2");
    return otsu_threshold(v.data(), std::size_t(v.size()), bins);
  });
  m.def("greedy_one_to_one", [](const CArray<std::int64_t>& pairs, const CArray<double>& scores, double threshold,
                                const CArray<std::int64_t>& ex_a, const CArray<std::int64_t>& ex_b, std::int64_t limit) {
    if (pairs.ndim() != 2 || (pairs.size() && pairs.shape(1) != 2)) throw py::value_error("pairs must be (P, 2)");
    if (scores.size() != pairs.shape(0)) throw py::value_error("scores must have one entry per pair");
    RowSet used_a, used_b;
    for (py::ssize_t t = 0; t < ex_a.size(); ++t) used_a.insert(ex_a.data()[t]);
    for (py::ssize_t t = 0; t < ex_b.size(); ++t) used_b.insert(ex_b.data()[t]);
    const std::int64_t* pp = pairs.data();
    const auto taken = greedy_one_to_one(pp, scores.data(), std::size_t(scores.size()), threshold, used_a, used_b, limit);
    py::array_t<std::int64_t> arr({py::ssize_t(taken.size()), py::ssize_t(2)});
    std::int64_t* out = arr.mutable_data();
    for (std::size_t r = 0; r < taken.size(); ++r) {
      out[2 * r] = pp[2 * taken[r]];
      out[2 * r + 1] = pp[2 * taken[r] + 1];
    }
    return arr;
  });

  py::class_<VoteTable>(m, "VoteTable")
      .def(py::init<>())
      .def("add",
           [](VoteTable& t, const CArray<std::int64_t>& pairs) {
             if (pairs.ndim() != 2 || pairs.shape(1) != 2) throw py::value_error("pairs must be (P, 2)");
             const std::int64_t* p = pairs.data();
             for (py::ssize_t i = 0; i < pairs.size(); ++i)
               if (p[i] < 0 || p[i] >= (std::int64_t(1) << 32)) throw py::value_error("pair indices must be in [0, 2^32)");
             t.add(p, std::size_t(pairs.shape(0)));
           })
      .def_property_readonly("n_views", &VoteTable::n_views)
      .def("size", &VoteTable::size)
      .def("votes",
           [](const VoteTable& t, const CArray<std::int64_t>& pairs) {
             if (pairs.ndim() != 2 || (pairs.size() && pairs.shape(1) != 2)) throw py::value_error("pairs must be (P, 2)");
             const std::int64_t* p = pairs.data();
             for (py::ssize_t i = 0; i < pairs.size(); ++i)  // larger ids would alias another pair's key
               if (p[i] < 0 || p[i] >= (std::int64_t(1) << 32)) throw py::value_error("pair indices must be in [0, 2^32)");
             py::array_t<std::int64_t> out(pairs.shape(0));
             for (py::ssize_t i = 0; i < pairs.shape(0); ++i)
               out.mutable_data()[i] = t.votes(pairs.data()[2 * i], pairs.data()[2 * i + 1]);
             return out;
           })
      .def("items", [](const VoteTable& t) {
        std::vector<std::int64_t> pairs, counts;
        t.items(pairs, counts);
        py::array_t<std::int64_t> p({py::ssize_t(counts.size()), py::ssize_t(2)});
        std::copy(pairs.begin(), pairs.end(), p.mutable_data());
        py::array_t<std::int64_t> c(py::ssize_t(counts.size()));
        std::copy(counts.begin(), counts.end(), c.mutable_data());
        return py::make_tuple(p, c);
      });

  m.def("lorentz_pairwise", &lorentz_pairwise_py<float>);
  m.def("lorentz_pairwise", &lorentz_pairwise_py<double>);
  m.def("lorentz_topk", &lorentz_topk_py<float>);
  m.def("lorentz_topk", &lorentz_topk_py<double>);

  // MeanGraph (graph.hpp): the HNSW graph whose stored vectors are the document
  // means. crossembed.ann validates the arguments; here: shapes, the label
  // copies the C++ side reads after the GIL is released, and the output buffers.
  {
    using G = MeanGraph;
    const auto storage_of = [](const std::string& name) {
      for (const Storage s : {Storage::float32, Storage::float16, Storage::int8, Storage::bf16})
        if (name == storage_name(s)) return s;
      throw py::value_error("storage must be 'float32', 'float16', 'int8' or 'bf16'");
    };
    const auto labels_copy = [](const CArray<std::int64_t>& labels) {
      if (labels.ndim() != 1) throw py::value_error("labels must be 1-dimensional");
      return std::vector<std::int64_t>(labels.data(), labels.data() + labels.size());
    };
    py::class_<G>(m, "MeanGraph")
        .def(py::init([storage_of](std::size_t dim, const std::string& storage, std::size_t max_elements,
                                   std::size_t M, std::size_t ef_construction, std::size_t random_seed) {
               const Storage st = storage_of(storage);
               py::gil_scoped_release release;
               return std::make_unique<G>(dim, st, max_elements, M, ef_construction, random_seed);
             }),
             py::arg("dim"), py::arg("storage"), py::arg("max_elements"), py::arg("M"), py::arg("ef_construction"),
             py::arg("random_seed"))
        .def_static(
            "load",
            [storage_of](const std::string& path, std::size_t dim, const std::string& storage,
                         std::size_t max_elements) {
              const Storage st = storage_of(storage);
              py::gil_scoped_release release;
              return G::load(path, dim, st, max_elements);
            },
            py::arg("path"), py::arg("dim"), py::arg("storage"), py::arg("max_elements"))
        .def(
            "add",
            [labels_copy](G& g, const CArray<float>& data, const CArray<std::int64_t>& labels, int nt) {
              require_2d(data, "data");
              if (std::size_t(data.shape(1)) != g.dim()) throw py::value_error("data has the wrong number of columns");
              const std::vector<std::int64_t> lv = labels_copy(labels);
              if (lv.size() != std::size_t(data.shape(0)))
                throw py::value_error("labels must have one entry per row of data");
              const float* x = data.data();
              py::gil_scoped_release release;
              g.add(x, lv.data(), lv.size(), nt);
            },
            py::arg("data"), py::arg("labels"), py::arg("num_threads"))
        .def(
            "mark_deleted",
            [labels_copy](G& g, const CArray<std::int64_t>& labels) {
              const std::vector<std::int64_t> lv = labels_copy(labels);
              py::gil_scoped_release release;
              g.mark_deleted(lv.data(), lv.size());
            },
            py::arg("labels"))
        .def(
            "resize",
            [](G& g, std::size_t max_elements) {
              py::gil_scoped_release release;
              g.resize(max_elements);
            },
            py::arg("max_elements"))
        .def(
            "knn",
            [](const G& g, const CArray<float>& queries, std::size_t k, std::size_t ef,
               const std::optional<CArray<bool>>& allowed, int nt) {
              require_2d(queries, "queries");
              if (std::size_t(queries.shape(1)) != g.dim())
                throw py::value_error("queries has the wrong number of columns");
              if (k < 1 || ef < 1) throw py::value_error("k and ef must be >= 1");
              if (allowed && allowed->ndim() != 1) throw py::value_error("allowed must be 1-dimensional");
              const bool* ap = allowed ? allowed->data() : nullptr;
              const std::size_t na = allowed ? std::size_t(allowed->size()) : 0;
              const auto q = queries.shape(0);
              py::array_t<std::int64_t> labels({q, py::ssize_t(k)});
              auto dist = new_f32(q, py::ssize_t(k));
              std::int64_t* lp = labels.mutable_data();
              float* dp = dist.mutable_data();
              {
                py::gil_scoped_release release;
                g.knn(queries.data(), std::size_t(q), k, ef, ap, na, lp, dp, nt);
              }
              return py::make_tuple(labels, dist);
            },
            py::arg("queries"), py::arg("k"), py::arg("ef"), py::arg("allowed"), py::arg("num_threads"))
        .def(
            "rows",
            [labels_copy](const G& g, const CArray<std::int64_t>& labels, int nt) {
              const std::vector<std::int64_t> lv = labels_copy(labels);
              auto out = new_f32(py::ssize_t(lv.size()), py::ssize_t(g.dim()));
              float* op = out.mutable_data();
              {
                py::gil_scoped_release release;
                g.rows(lv.data(), lv.size(), op, nt);
              }
              return out;
            },
            py::arg("labels"), py::arg("num_threads"))
        .def(
            "rows_into",
            [labels_copy](const G& g, const CArray<std::int64_t>& labels, py::array out, int nt) {
              const std::vector<std::int64_t> lv = labels_copy(labels);
              if (!out.dtype().is(py::dtype::of<float>()) || !(out.flags() & py::array::c_style) || !out.writeable())
                throw py::type_error("out must be a writeable C-contiguous float32 array");
              if (out.ndim() != 2 || std::size_t(out.shape(0)) != lv.size() || std::size_t(out.shape(1)) != g.dim())
                throw py::value_error("out must have shape (len(labels), dim)");
              float* op = static_cast<float*>(out.mutable_data());
              py::gil_scoped_release release;
              g.rows(lv.data(), lv.size(), op, nt);
            },
            py::arg("labels"), py::arg("out"), py::arg("num_threads"))
        .def(
            "save",
            [](const G& g, const std::string& path) {
              py::gil_scoped_release release;
              g.save(path);
            },
            py::arg("path"))
        .def_property_readonly("dim", &G::dim)
        .def_property_readonly("storage", [](const G& g) { return std::string(storage_name(g.storage())); })
        .def_property_readonly("count", &G::count)
        .def_property_readonly("deleted_count", &G::deleted)
        // these two wait for a running add/resize: without the GIL
        .def_property_readonly("max_elements",
                               py::cpp_function(&G::max_elements, py::call_guard<py::gil_scoped_release>()))
        .def_property_readonly("M", &G::M)
        .def_property_readonly("ef_construction", &G::ef_construction)
        .def_property_readonly("nbytes", py::cpp_function(&G::nbytes, py::call_guard<py::gil_scoped_release>()));
  }
}
