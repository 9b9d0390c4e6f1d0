#include <pybind11/pybind11.h>
namespace py = pybind11;
PYBIND11_MODULE(_core, m) { m.def("simd_level", []() { return "generic"; }); }
