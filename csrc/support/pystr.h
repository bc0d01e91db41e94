// Text of Python objects for messages and dumps. Never leaves a Python error set.
#pragma once
#include <Python.h>

#include <string>

namespace fastcomp {

std::string py_str(PyObject* o);   // str(o), "?" on failure
std::string py_repr(PyObject* o);  // repr(o), "?" on failure
std::string utf8(PyObject* s);     // the UTF-8 of a str object, "?" for null or non-str
// Takes the pending Python exception (if any) and returns "Type: message"; clears it.
std::string take_error_message();

}  // namespace fastcomp
