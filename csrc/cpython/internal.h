// The one include block for CPython's internal headers (Py_BUILD_CORE): the _PyInterpreterFrame layout
// (pycore_frame.h) and the CO_FAST_* slot kinds (pycore_code.h). Only frame_py3XX.cpp include it, so the
// struct layouts fastcomp depends on are read in exactly two files per version.
//
// These headers compile as C++ (checked with GCC 12 on 3.11.7, 3.12.1 and 3.12.10; 3.12's pycore_atomic.h
// problem is MSVC-only, and the C-only pycore_pystate.h is not needed). Re-check when adding a version; if
// they stop compiling as C++, move the frame_py3XX code behind a narrow C ABI in a .c file.
#pragma once
#include <Python.h>

#include "cpython/version.h"

#if FC_PY_MINOR == 11 || FC_PY_MINOR == 12
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE
#define FC_DEFINED_PY_BUILD_CORE
#endif
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#ifdef FC_DEFINED_PY_BUILD_CORE
#undef Py_BUILD_CORE
#undef FC_DEFINED_PY_BUILD_CORE
#endif
#else
#error "fastcomp: the internal headers are not audited for this CPython version; see csrc/cpython/README.md"
#endif
