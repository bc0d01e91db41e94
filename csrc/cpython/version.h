// The one place that turns the CPython version into feature macros. Everything outside csrc/cpython/ and
// csrc/frontend/bytecode/ tests these features, never PY_VERSION_HEX.
#pragma once
#include <Python.h>

#if PY_VERSION_HEX >= 0x030D0000
#error "fastcomp: the CPython 3.13+ frame layout and bytecode are not audited yet; see csrc/cpython/README.md"
#elif PY_VERSION_HEX >= 0x030C0000
#define FC_PY_MINOR 12
#elif PY_VERSION_HEX >= 0x030B0000
#define FC_PY_MINOR 11
#else
#error "fastcomp needs CPython 3.11 or newer"
#endif
