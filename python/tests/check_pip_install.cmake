# SPDX-License-Identifier: Apache-2.0
# `pip install .` of the source tree into a scratch target, then an import of dcp from there that
# plans a tiny batch, as a user without the build tree would.
#   cmake -DPYTHON=<interpreter> -DSOURCE=<dcp source> -DWORK=<scratch dir> [-DCXX=<compiler>]
#         -P check_pip_install.cmake
# CXX: the C++ compiler the wheel's build uses (default: what pip and CMake find).
# The wheel's CMake build directory is kept in WORK/build between runs, so a rerun rebuilds only
# what changed; the installed target is made afresh.
foreach(var PYTHON SOURCE WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_pip_install.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_pip_install.cmake: ${step} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${step}: ok")
endfunction()

file(REMOVE_RECURSE ${WORK}/target)
set(compiler)
if(DEFINED CXX)
  set(compiler ${CMAKE_COMMAND} -E env CXX=${CXX})
endif()
run("pip install" ${compiler} ${PYTHON} -m pip install --no-build-isolation --no-deps --no-cache-dir
                  --disable-pip-version-check --target ${WORK}/target
                  --config-settings=build-dir=${WORK}/build ${SOURCE})
run("import and plan" ${PYTHON} -c "
import sys
sys.path.insert(0, '${WORK}/target')
import dcp
assert dcp.__file__.startswith('${WORK}/target'), dcp.__file__
plan = dcp.plan(dcp.Batch([300, 200], 'causal'), topology='1x2', block_size=64)
assert plan.devices == 2 and dcp.Plan.from_bytes(plan.to_bytes()) == plan
print(plan)
")
