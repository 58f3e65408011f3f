# SPDX-License-Identifier: Apache-2.0
# Chooses the one interpreter the Python package is built and tested with, never whatever python3
# comes first on PATH. In order:
#   1. -DDCP_PYTHON=... (cached);
#   2. under scikit-build-core (SKBUILD): the interpreter building the wheel (Python_EXECUTABLE);
#   3. the environment variable DCP_PYTHON;
#   4. the interpreter scripts/setup.sh recorded in <source>/.dcp-python (git-ignored);
#   5. the default venv of scripts/setup.sh, ${XDG_CACHE_HOME:-$HOME/.cache}/dcp-venv/bin/python.
# Sets DCP_PYTHON_OK when that interpreter runs and imports torch >= 2.4 (under SKBUILD only the
# interpreter is checked: torch is a run-time dependency, absent from an isolated build
# environment) and pybind11, whose CMake package it then finds.
set(DCP_PYTHON "" CACHE FILEPATH "Interpreter of the Python package (see cmake/dcp_python.cmake)")
set(DCP_PYTHON_OK OFF)

set(dcp_python ${DCP_PYTHON})
if(NOT dcp_python AND SKBUILD)
  set(dcp_python ${Python_EXECUTABLE})
endif()
if(NOT dcp_python AND NOT "$ENV{DCP_PYTHON}" STREQUAL "")
  set(dcp_python $ENV{DCP_PYTHON})
endif()
set(dcp_python_explicit ${dcp_python})  # named by the user: unusable is an error, not a skip
set(dcp_python_record ${PROJECT_SOURCE_DIR}/.dcp-python)
if(EXISTS ${dcp_python_record})
  # Rerunning scripts/setup.sh with another DCP_PYTHON reconfigures.
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND
               PROPERTY CMAKE_CONFIGURE_DEPENDS ${dcp_python_record})
  if(NOT dcp_python)
    file(STRINGS ${dcp_python_record} dcp_python LIMIT_COUNT 1)
  endif()
endif()
if(NOT dcp_python)
  if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
    set(dcp_cache $ENV{XDG_CACHE_HOME})
  else()
    set(dcp_cache $ENV{HOME}/.cache)
  endif()
  if(EXISTS ${dcp_cache}/dcp-venv/bin/python)
    set(dcp_python ${dcp_cache}/dcp-venv/bin/python)
  endif()
endif()

if(NOT dcp_python)
  message(STATUS "dcp: Python package skipped (no interpreter: see scripts/setup.sh)")
  return()
endif()
if(DCP_SANITIZE)
  # The extension would need the sanitizer runtime preloaded into the interpreter.
  message(STATUS "dcp: Python package skipped (DCP_SANITIZE)")
  return()
endif()

if(SKBUILD)
  set(dcp_check "import pybind11")
else()
  set(dcp_check "import sys, torch, pybind11
v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2])
sys.exit(0 if v >= (2, 4) else 'torch ' + torch.__version__ + ' is older than 2.4')")
endif()
execute_process(COMMAND ${dcp_python} -c "${dcp_check}" RESULT_VARIABLE dcp_rc
                OUTPUT_VARIABLE dcp_out ERROR_VARIABLE dcp_out)
if(NOT dcp_rc EQUAL 0)
  string(STRIP "${dcp_out}" dcp_out)
  string(REGEX REPLACE ".*\n" "" dcp_out "${dcp_out}")  # the last line: the error itself
  set(dcp_why "${dcp_python} cannot be used: ${dcp_out}")
  if(dcp_python_explicit)
    message(FATAL_ERROR "dcp: Python package: ${dcp_why}")
  endif()
  message(STATUS "dcp: Python package skipped (${dcp_why})")
  return()
endif()
execute_process(COMMAND ${dcp_python} -m pybind11 --cmakedir OUTPUT_VARIABLE pybind11_DIR
                OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
set(DCP_PYTHON_EXECUTABLE ${dcp_python})
set(DCP_PYTHON_OK ON)
message(STATUS "dcp: Python package enabled (${dcp_python})")
