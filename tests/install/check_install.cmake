# SPDX-License-Identifier: Apache-2.0
# Installs the build in BUILD into a fresh prefix, then configures, builds and runs the consumer
# project (tests/install/consumer/) against it, as a project outside dcp's tree would.
#   cmake -DSOURCE=<dcp source> -DBUILD=<dcp build> -DCONFIG=<config> -DGENERATOR=<generator>
#         -DCXX=<compiler> [-DLAUNCHER=<compiler launcher>] -P check_install.cmake
foreach(var SOURCE BUILD CONFIG GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_install.cmake: -D${var}=... is required")
  endif()
endforeach()

set(work ${BUILD}/install-test)
if(CONFIG STREQUAL "")
  set(CONFIG Release)  # a single-config build without CMAKE_BUILD_TYPE
endif()
file(REMOVE_RECURSE ${work})

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_install.cmake: ${step} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${step}: ok")
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD} --config ${CONFIG} --prefix ${work}/prefix)
set(configure_args -S ${SOURCE}/tests/install/consumer -B ${work}/build -G ${GENERATOR}
                   -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${CONFIG}
                   -DCMAKE_PREFIX_PATH=${work}/prefix)
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("configure the consumer" ${CMAKE_COMMAND} ${configure_args})
run("build the consumer" ${CMAKE_COMMAND} --build ${work}/build --config ${CONFIG})
find_program(consumer consumer PATHS ${work}/build ${work}/build/${CONFIG} NO_DEFAULT_PATH REQUIRED)
run("run the consumer" ${consumer})
